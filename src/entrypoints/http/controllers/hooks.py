"""``/api/hooks/deploy/{hookId}``: where a Git forge POSTs its push events.

No API token opens it, and it opens nothing else: the id in the URL finds the hook, and
the delivery's signature (HMAC-SHA256 of the body with the hook's secret, as GitHub,
Gitea and Forgejo sign) is the credential, checked by the core (``ReceivePush``) before
anything is read from the body. The body is capped (``PUSH_BODY_MAX``) before it is read
whole.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from berth.core.bus import MessageBus
from berth.core.commands import ReceivePush
from berth.core.pushes import PUSH_BODY_MAX
from litestar import Controller, Request, Response, post
from litestar.di import NamedDependency

from ...settings import Settings
from ..errors import problem_response as _problem
from ..openapi import documented
from ..parameters import HookId
from ..schemas import PushOut, push_out
from ..urls import base_url

__all__ = ["HOOKS_PATH", "DeployHookController", "hook_url"]

#: Where hooks live (outside ``/api/agent``: no bearer token there).
HOOKS_PATH = "/api/hooks/deploy"


def hook_url(request: Request[Any, Any, Any], settings: Settings, hook_id: UUID) -> str:
    """The URL a forge POSTs to for hook ``hook_id``."""
    return f"{base_url(request, settings)}{HOOKS_PATH}/{hook_id}"


class DeployHookController(Controller):
    """The one route of deploy hooks (its signature is its authentication)."""

    path = HOOKS_PATH
    tags = ["public"]

    @documented(
        post,
        "/{hookId:str}",
        "receivePush",
        status_code=202,
        responses={
            400: _problem("The request could not be parsed."),
            401: _problem(
                "The delivery is not signed with the hook's secret (X-Hub-Signature-256 or "
                "X-Gitea-Signature missing or wrong): nothing was done."
            ),
            403: _problem("The hook's team no longer allows its deploys."),
            404: _problem("No such hook (removed, or never made)."),
            409: _problem(
                "The installation cannot be deployed so: `not-built-from-git`, "
                "`installation-removed`, `server-pending`, `host-key-mismatch`, "
                "`server-removed`, or `port-in-use`."
            ),
            413: _problem("The body is over 5 MiB."),
            422: _problem("A signed push event without `ref` or `after`."),
        },
        request_max_body_size=PUSH_BODY_MAX,
    )
    async def receive_push(
        self, bus: NamedDependency[MessageBus], hook_id: HookId, request: Request[Any, Any, Any]
    ) -> Response[PushOut]:
        """Receive a push event (a Git forge's webhook)

        The URL of `createDeployHook`, POSTed by GitHub, Gitea or Forgejo with a push
        event: signed with the hook's secret (`X-Hub-Signature-256: sha256=<hex>` or
        `X-Gitea-Signature: <hex>`, the HMAC-SHA256 of the raw body), it deploys the pushed
        commit (`after`) when the ref pushed (`ref`) is the branch the app is built from —
        as a new deployment of the app's last spec and env, built from that commit. A
        deployment of an earlier push still queued is superseded (canceled); one running
        finishes first. Another branch, a tag, a deleted branch, or an event that is no
        push (GitHub's `ping`) is answered 202 `ignored`.

        Returns:
            Accepted: `queued` with the deployment's id (poll it with a token: `GET
            /api/agent/deployments/{deploymentId}`), or `ignored` saying why.
        """
        body = await request.body()
        headers = {name.lower(): value for name, value in request.headers.items()}
        outcome = await bus.handle(ReceivePush(hook_id=hook_id, body=body, headers=headers))
        return Response(push_out(outcome), status_code=202)
