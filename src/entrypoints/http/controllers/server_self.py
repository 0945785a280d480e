"""The install script's routes after enrollment, authenticated by the server itself.

``GET /api/agent/servers/self`` tells the script its server's status while it waits for
``online``; ``POST /api/agent/servers/self/uninstall`` reports ``--uninstall`` (berth
drops its connection and marks the server ``removed``). Each request carries
``Authorization: Bearer berth_sig.<server id>.<unix time>.<signature>``: an SSHSIG
signature (``ssh-keygen -Y sign -n berth-server@berth``) made with one of the server's
SSH host keys berth pinned, over the method, path, server id and time
(``berth.core.use_cases.server_self.signed_message``). No API or enrollment token
opens these routes, and this signature opens nothing else.
"""

from __future__ import annotations

from typing import Any

from berth.core.bus import MessageBus
from berth.core.commands import ReportUninstalled, ServerSelfStatus, ServerSignature
from litestar import Controller, Request, get, post
from litestar.di import NamedDependency, Provide

from ..errors import problem_response as _problem
from ..openapi import documented
from ..schemas import EnrollmentStatusOut, enrollment_status_out

__all__ = ["ServerSelfController"]

_AUTH = {
    401: _problem("Missing or malformed signature, too old, or not by a pinned host key."),
    429: _problem("Too many failed attempts from this address, or too many requests."),
}


def _signature_of(request: Request[Any, Any, Any]) -> ServerSignature:
    """The signed request ``auth.server_signature_auth`` checked."""
    signature: ServerSignature = request.scope["auth"]
    return signature


class ServerSelfController(Controller):
    """The signing server's own routes (``auth.server_signature_auth`` on the router)."""

    path = "/"
    dependencies = {"server_signature": Provide(_signature_of, sync_to_thread=False)}

    @documented(get, "/", "getOwnServerStatus", responses=_AUTH)
    async def status(
        self, bus: NamedDependency[MessageBus], server_signature: NamedDependency[ServerSignature]
    ) -> EnrollmentStatusOut:
        """The signing server's status (install script)

        The server's id, status (`offline`, `online`, `removed`), why it is offline and its
        SSH port; nothing else. The install script polls it after enrolling, since the
        enrollment token is spent by then.

        Returns:
            The server's status.
        """
        return enrollment_status_out(await bus.handle(ServerSelfStatus(signature=server_signature)))

    @documented(post, "/uninstall", "reportUninstalled", status_code=200, responses=_AUTH)
    async def uninstalled(
        self, bus: NamedDependency[MessageBus], server_signature: NamedDependency[ServerSignature]
    ) -> EnrollmentStatusOut:
        """Report that the install script uninstalled berth (install script)

        The server's `--uninstall` removed berth's key: berth drops its SSH connection to it
        and marks it `removed` (no longer monitored; a deploy to it is a 409
        `server-removed`). Idempotent; no body. Delete the server in berth to forget it.

        Returns:
            The server, now `removed`.
        """
        return enrollment_status_out(
            await bus.handle(ReportUninstalled(signature=server_signature))
        )
