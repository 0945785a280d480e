"""The install script's two routes, authenticated by the server's one-time enrollment token.

``POST /api/agent/servers/enroll`` registers the server's SSH host keys and facts (once);
``GET /api/agent/servers/enroll`` tells the script its server's status before it enrolls
(until the token is used or expires; then ``server_self``'s routes). Neither accepts an
API token, and the API token's middleware never sees them: the enrollment token grants
these two things and nothing else.
"""

from __future__ import annotations

from typing import Any

from berth.core.bus import MessageBus
from berth.core.commands import EnrollCommand, EnrollmentStatus, EnrollServer
from berth.core.types import authorized_keys_line
from litestar import Controller, Request, get, post
from litestar.di import NamedDependency, Provide
from litestar.params import JSONBody

from ..errors import problem_response as _problem
from ..openapi import documented
from ..schemas import EnrolledOut, EnrollmentStatusOut, enrollment_status_out

__all__ = ["EnrollmentController"]

_AUTH = {
    401: _problem("Missing, malformed, unknown or expired enrollment token (or, to enroll, used)."),
    429: _problem("Too many failed attempts from this address, or too many requests."),
}


def _token_of(request: Request[Any, Any, Any]) -> str:
    """The enrollment token ``auth.enrollment_auth`` checked."""
    token: str = request.scope["auth"]
    return token


class EnrollmentController(Controller):
    """The install script's routes; ``Authorization: Bearer <enrollment token>``
    (``auth.enrollment_auth``, mounted on this controller's router)."""

    path = "/"
    dependencies = {"enrollment_token": Provide(_token_of, sync_to_thread=False)}

    @documented(
        post,
        "/",
        "enrollServer",
        status_code=200,
        responses={
            **_AUTH,
            400: _problem("The body is not valid JSON."),
            413: _problem("The body is over 1 MiB."),
            415: _problem("The body is not application/json."),
            409: _problem(
                "`sshPort` differs from the port given when the server was added (not 22) "
                "(`conflict`, naming `body.sshPort`)."
            ),
            422: _problem("Fields break their rules (invalid-input): `errors` lists every one."),
        },
    )
    async def enroll(
        self,
        request: Request[Any, Any, Any],
        bus: NamedDependency[MessageBus],
        enrollment_token: NamedDependency[str],
        data: JSONBody[EnrollCommand],
    ) -> EnrolledOut:
        """Enroll a server: pin its SSH host keys, record its facts (install script)

        Once per enrollment token, within its hour: a used or expired token gets 401. The
        server keeps the address it was created with; without one, berth uses the address
        this request came from. `sshPort` replaces the server's SSH port when that is 22
        (none was given); any other port given when the server was added stays, and a
        different `sshPort` is a 409. The server is then `offline` until berth first reaches
        it.

        Returns:
            Enrolled: authorize `authorizedKeysLine` for `sshUser`.
        """
        server = await bus.handle(
            EnrollServer(
                token=enrollment_token,
                enrollment=data,
                client_address=request.client.host if request.client else None,
            )
        )
        return EnrolledOut(
            server_id=server.id,
            ssh_user=server.ssh_user,
            public_key=server.public_key,
            authorized_keys_line=(
                authorized_keys_line(server.public_key) if server.public_key else None
            ),
            status=server.status,
        )

    @documented(get, "/", "getEnrollmentStatus", responses=_AUTH)
    async def status(
        self, bus: NamedDependency[MessageBus], enrollment_token: NamedDependency[str]
    ) -> EnrollmentStatusOut:
        """The enrolling server's status (install script)

        Until the enrollment token is used or expires: the server's id, status (`pending`),
        and the SSH port berth connects to. Nothing else. After enrollment the script asks
        `GET /api/agent/servers/self`, signed with the server's host key.

        Returns:
            The server's id and status.
        """
        return enrollment_status_out(await bus.handle(EnrollmentStatus(token=enrollment_token)))
