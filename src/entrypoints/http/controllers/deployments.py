"""``/api/agent/docker/deploy`` and ``/api/agent/deployments``: deploy, then follow,
stream or cancel a deployment."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from berth.core import commands as c
from litestar import Controller, Request, Response, get, post
from litestar.di import NamedDependency
from litestar.openapi.datastructures import ResponseSpec
from litestar.params import JSONBody
from litestar.response import ServerSentEvent
from msgspec.structs import replace

from ..events import event_stream
from ..openapi import documented
from ..parameters import DeploymentId, IdempotencyKey, LastEventId, LastEventIdQuery, Wait
from ..schemas import DeploymentOut, DeployOut, deployment_out
from .common import READ, WRITE, Caller, answer, queued

__all__ = ["CANCEL_WAIT", "DeploymentController"]

#: Seconds a cancel of a running deployment waits for it to end, unless ``?wait`` says.
CANCEL_WAIT = 15.0


_ENDED = ResponseSpec(
    data_container=None,
    description="No Content: the deployment has ended and nothing follows "
    "`Last-Event-ID` (an `EventSource` reconnecting after the `end` message: "
    "a 204 stops it). GET the deployment for its final state.",
    generate_examples=False,
)


async def _events(
    request: Request[Any, Any, Any], caller: Caller, deployment_id: UUID, after: int | None
) -> ServerSentEvent | Response[None]:
    """The deployment's events after ``after`` as a stream, or a 204 when it has ended
    and nothing follows."""
    feed = await caller(c.FollowDeployment(deployment_id=deployment_id, after=after or 0))
    if after and feed.spent:
        return Response(None, status_code=204)
    return event_stream(request, feed)


class DeploymentController(Controller):
    path = "/"

    @documented(
        post,
        "/docker/deploy",
        "deploy",
        status_code=202,
        responses={
            **WRITE,
            200: answer(
                DeployOut,
                "With `?wait`: the deployment reached a final state within the wait "
                "(`deployment.state` says which: `succeeded` means the app answered on its "
                "port).",
            ),
        },
    )
    async def deploy(
        self,
        caller: NamedDependency[Caller],
        data: JSONBody[c.DeployCommand],
        wait: Wait = None,
        idempotency_key: IdempotencyKey = None,
    ) -> Response[DeployOut]:
        """Deploy a Docker application on one of your servers

        Queues a deployment of `image` as the app `name` (a name that exists on the server
        redeploys it). Without a domain the container port is also the published host port;
        with one, Caddy routes the domain to it over HTTPS. `?wait=N` waits up to N seconds
        for a final state; `Idempotency-Key` makes a retry return the first deployment.
        Follow it at the `Location` URL.

        Returns:
            Accepted: the deployment is queued (state `queued`), or still running when
            `?wait` ended. The body is the deployment and its installation; poll `Location`
            (GET /api/agent/deployments/{deploymentId}) or stream its events until `state`
            is final. A queued deployment of the same app is superseded (canceled).

        Raises:
            409: Refused, nothing written; `type` says why: `port-in-use` (another
                domain-less installation on the server publishes this host port, or, on an
                `online` server, a container or process holds it: checked by a TCP connect
                over the server's transport, and named in `detail`; errors: `body.hostPort`,
                or `body.port` when no host port was given),
                `domain-in-use` (`body.domain`), `deployment-running` (a
                deployment of this app is running: wait for it), `server-pending` (the
                server has not enrolled: `body.serverId`), `host-key-mismatch` (the server's
                host key changed: `body.serverId`), `idempotency-key-reused` (the key was
                used with another body: `header.Idempotency-Key`).
        """
        command = replace(data, wait=float(wait or 0), idempotency_key=idempotency_key)
        return await queued(caller, await caller(command), wait)

    @documented(get, "/deployments/{deploymentId:str}", "getDeployment", responses=READ)
    async def get_deployment(
        self, caller: NamedDependency[Caller], deployment_id: DeploymentId
    ) -> DeploymentOut:
        """A deployment and its log

        Its `state` (`queued`, `running`, then one of `succeeded`, `failed`, `timed_out`,
        `canceled`), its current `step` and its `events`, oldest first.

        Returns:
            The deployment.
        """
        return deployment_out(await caller(c.GetDeployment(deployment_id=deployment_id)))

    @documented(
        get,
        "/deployments/{deploymentId:str}/events",
        "streamDeploymentEvents",
        responses={
            **READ,
            204: _ENDED,
        },
        media_type="text/event-stream",
    )
    async def deployment_events(
        self,
        request: Request[Any, Any, Any],
        caller: NamedDependency[Caller],
        deployment_id: DeploymentId,
        last_event_id_query: LastEventIdQuery = None,
        last_event_id: LastEventId = None,
    ) -> ServerSentEvent | Response[None]:
        """A deployment's events as a live stream (Server-Sent Events)

        `text/event-stream`: the deployment's past events, then its live ones as they are
        written, then an `end` message with its final state, and the stream closes. Each
        event is a message `id: <event id>`, `event: step`, `data: {"at","step","message"}`
        (JSON). The `end` message is `event: end`, `data: {"state"}`. A comment (`:
        keep-alive`) is sent after 15 s without an event. `Last-Event-ID` (sent by an
        `EventSource` when it reconnects) or `?lastEventId` resumes after that event. A
        finished deployment's stream replays its events and ends at once. A stream ends
        within 5 s of its token's revocation. Resuming after the last event of a
        deployment that has ended is a `204` (an `EventSource` then stops reconnecting).

        Returns:
            The stream of the deployment's events.

        Raises:
            429: As many streams are open as allowed, yours or this berth's
                (`too-many-streams`, detail names the limit): close one, or retry later.
        """
        return await _events(request, caller, deployment_id, last_event_id or last_event_id_query)

    @documented(
        get,
        "/deployments/{deploymentId:str}/events/text",
        "streamDeploymentEventsText",
        responses={**READ, 204: _ENDED},
        media_type="text/event-stream",
    )
    async def deployment_events_text(
        self,
        request: Request[Any, Any, Any],
        caller: NamedDependency[Caller],
        deployment_id: DeploymentId,
        last_event_id_query: LastEventIdQuery = None,
        last_event_id: LastEventId = None,
    ) -> ServerSentEvent | Response[None]:
        """A deployment's events as one text (Server-Sent Events), for generated clients

        The same stream as `GET /api/agent/deployments/{deploymentId}/events`, byte for
        byte, described for a client generated from this document that reads an answer
        whole: its 200 is the stream's text (a string), which ends with the deployment's
        `end` message; each event in it is as that operation describes. A client that
        reads events as they come uses that operation.

        Returns:
            The stream of the deployment's events, read whole: a string.

        Raises:
            429: As many streams are open as allowed, yours or this berth's
                (`too-many-streams`, detail names the limit): close one, or retry later.
        """
        return await _events(request, caller, deployment_id, last_event_id or last_event_id_query)

    @documented(
        post,
        "/deployments/{deploymentId:str}/cancel",
        "cancelDeployment",
        status_code=200,
        responses={
            **READ,
            202: answer(
                DeploymentOut,
                "Accepted: the cancel is recorded but the deployment was still running when "
                "the wait ended; its worker stops it shortly and puts the previous revision "
                "back. Poll `Location` until `state` is `canceled`.",
            ),
        },
        description="A queued deployment ends `canceled` at once. A running one is stopped "
        "where it is and the previous revision is put back; the call waits for that, up to "
        f"`wait` seconds (default {CANCEL_WAIT:g}), and answers `200` once it ended "
        "`canceled` (or `202` if it still runs). A deployment that already ended is a 409.",
    )
    async def cancel_deployment(
        self, caller: NamedDependency[Caller], deployment_id: DeploymentId, wait: Wait = None
    ) -> Response[DeploymentOut]:
        """Cancel a queued or running deployment

        Returns:
            The deployment, canceled.

        Raises:
            409: Nothing to cancel (deployment-finished): the deployment already ended; its
                `state` is final.
        """
        cancel = c.CancelDeployment(
            deployment_id=deployment_id, wait=CANCEL_WAIT if wait is None else wait
        )
        found = await caller(cancel)
        return Response(
            deployment_out(found),
            status_code=200 if found.state.is_final else 202,
            headers={"Location": f"/api/agent/deployments/{found.id}"},
        )
