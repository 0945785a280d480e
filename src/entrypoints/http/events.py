"""A deployment's feed (``core.use_cases.FollowDeployment``) as Server-Sent Events.

Each event of the deployment's log is a message ``id: <event id>``, ``event: step``,
``data: {"at","step","message"}``; its end is ``event: end``, ``data: {"state"}``
(no id: a client resuming with ``Last-Event-ID`` resumes after the last step); a
heartbeat is a comment. The client going away closes the feed (Litestar stops the
iteration when the connection ends). Every stream is ``streams.guarded``: counted
against the user's and the process's limits, and ended once the request's token or
session is revoked.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import msgspec
from berth.core.results import DeploymentFeed, FeedEnd, FeedEvent, LogStream
from litestar import Request
from litestar.response import ServerSentEvent, Stream
from litestar.response.sse import ServerSentEventMessage

from .inputs import read_whole
from .parameters import EVENT_ID_MAX
from .schemas import event_out
from .streams import guarded

__all__ = ["event_stream", "last_event_id_of", "log_events", "log_stream"]

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
                data = msgspec.json.encode(event_out(item.event)).decode()
                yield ServerSentEventMessage(id=item.id, event="step", data=data)
            elif isinstance(item, FeedEnd):
                data_end = EndOut(state=item.state.value)
                yield ServerSentEventMessage(
                    event="end", data=msgspec.json.encode(data_end).decode()
                )
            else:
                yield ServerSentEventMessage(data=None, comment="keep-alive")

    return messages()


def log_stream(request: Any, stream: LogStream) -> Stream:
    """The response streaming a container's output: ``text/plain``, a line each, sent
    as read (no buffering by proxies that honour ``X-Accel-Buffering``)."""

    async def lines() -> AsyncIterator[bytes]:
        async for line in stream:
            yield (line + "\n").encode("utf-8", errors="replace")

    # The header itself: Litestar prefers the route's media type (JSON, for the body
    # without ``follow``) to a Stream's own.
    return Stream(
        guarded(request, lines()),
        media_type="text/plain",
        headers={
            "content-type": "text/plain; charset=utf-8",
            "Cache-Control": "no-cache",
            "X-Accel-Buffering": "no",
        },
    )


def event_stream(request: Any, feed: DeploymentFeed) -> ServerSentEvent:
    """The response streaming ``feed``: ``text/event-stream``, never cached or buffered."""
    return ServerSentEvent(guarded(request, _messages(feed)))


class LineOut(msgspec.Struct, frozen=True, kw_only=True):
    """A ``line`` message's data: the line's text and Docker's time of it (if asked)."""

    text: str
    at: str | None


def log_events(
    request: Any, stream: LogStream, shape: Callable[[str], tuple[str, str | None]]
) -> ServerSentEvent:
    """A container's followed output as Server-Sent Events, for a page's script: each
    line an ``event: line`` whose data is ``{"text","at"}`` (``shape`` splits a raw line
    into the two), then ``event: end`` when the stream ends (the container stopped or
    was replaced). No ids: a client that reconnects is sent the last lines again."""

    async def messages() -> AsyncIterator[ServerSentEventMessage]:
        yield ServerSentEventMessage(data=None, retry=RETRY_MS)
        async for raw in stream:
            text, at = shape(raw)
            data = msgspec.json.encode(LineOut(text=text, at=at)).decode()
            yield ServerSentEventMessage(event="line", data=data)
        yield ServerSentEventMessage(event="end", data="{}")

    return ServerSentEvent(guarded(request, messages()))


def last_event_id_of(request: Request[Any, Any, Any]) -> int:
    """Where an event stream resumes: the ``Last-Event-ID`` header (what an ``EventSource``
    sends when it reconnects), else ``?lastEventId``, an event id; 0 (from the first) when
    neither is given. A value that is not an id is a 422 at ``header.Last-Event-ID`` or
    ``query.lastEventId``."""
    for where, name in (("header", "Last-Event-ID"), ("query", "lastEventId")):
        found = read_whole(request, where, name, EVENT_ID_MAX, "an event id")
        if found is not None:
            return found
    return 0
