"""A deployment's feed (``core.use_cases.FollowDeployment``) as Server-Sent Events.

Each event of the deployment's log is a message ``id: <event id>``, ``event: step``,
``data: {"at","step","message"}``; its end is ``event: end``, ``data: {"state"}``
(no id: a client resuming with ``Last-Event-ID`` resumes after the last step); a
heartbeat is a comment. The client going away closes the feed (Litestar stops the
iteration when the connection ends).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import msgspec
from berth.core.use_cases import DeploymentFeed, FeedEnd, FeedEvent
from litestar.response import ServerSentEvent
from litestar.response.sse import ServerSentEventMessage

from .schemas import EventOut

__all__ = ["event_stream"]

#: What a browser's ``EventSource`` waits before reconnecting, in milliseconds.
RETRY_MS = 2000


class EndOut(msgspec.Struct, frozen=True, kw_only=True):
    """The ``end`` message's data: the deployment's final state."""

    state: str


def _messages(feed: DeploymentFeed) -> AsyncIterator[ServerSentEventMessage]:
    async def messages() -> AsyncIterator[ServerSentEventMessage]:
        yield ServerSentEventMessage(data=None, retry=RETRY_MS)
        async for item in feed:
            if isinstance(item, FeedEvent):
                event = item.event
                data = EventOut(at=event.at, step=event.step, message=event.message)
                yield ServerSentEventMessage(
                    id=item.id, event="step", data=msgspec.json.encode(data).decode()
                )
            elif isinstance(item, FeedEnd):
                data_end = EndOut(state=item.state.value)
                yield ServerSentEventMessage(
                    event="end", data=msgspec.json.encode(data_end).decode()
                )
            else:
                yield ServerSentEventMessage(data=None, comment="keep-alive")

    return messages()


def event_stream(feed: DeploymentFeed) -> ServerSentEvent:
    """The response streaming ``feed``: ``text/event-stream``, never cached or buffered."""
    return ServerSentEvent(_messages(feed))
