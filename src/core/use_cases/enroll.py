"""Enrollment: a server's install script registers it with its one-time token.

The script sends the server's SSH host keys (berth pins them before it first
connects) and facts with the enrollment token that ``CreateServer`` returned.
The token enrolls once, within its hour; until then it also lets the script read
the server's status (pending) — and nothing else. Once used it opens nothing: the
script then reads the status with a request signed by the server's host key
(``server_self``), so a token seen after the fact (a log, a shell history) is worth
nothing.
"""

from __future__ import annotations

from datetime import datetime

import msgspec
import structlog

from .. import commands as c
from .. import tokens
from ..access import Actor
from ..errors import ENROLLMENT_REFUSED, Conflict, Unauthorized
from ..models import Server, ServerStatus
from ..types import DEFAULT_SSH_PORT, RuleError, check_address
from .owned import UsesStoreAndClock

__all__ = ["REFUSED", "EnrollServer", "EnrollmentStatus"]

log = structlog.get_logger()

REFUSED = ENROLLMENT_REFUSED


def _usable(server: Server | None, now: datetime) -> Server:
    """The server of a token that has not expired, else ``Unauthorized``."""
    expires = server.enrollment_expires_at if server is not None else None
    if server is None or expires is None or expires <= now:
        raise Unauthorized(REFUSED)
    return server


class EnrollServer(UsesStoreAndClock):
    """Enroll the pending server of ``token``: pin its host keys, record its facts.

    Raises ``Unauthorized`` for a malformed, unknown, expired or already used token
    (a server created with ``hostKeys`` counts as enrolled). The address berth will
    connect to stays the one the user gave; without one it becomes the address the
    enrollment came from (``client_address``). ``cmd.ssh_port``, when given, replaces
    the server's port if that is ``DEFAULT_SSH_PORT`` (the user gave none): the script
    reports the port its SSH server listens on, or the one it was told (``--ssh-port``,
    e.g. behind port forwarding). A port the user gave is never replaced silently: a
    different ``cmd.ssh_port`` raises ``Conflict`` and nothing is written.
    The server is then ``offline`` until the monitor first reaches it.
    """

    async def __call__(self, actor: Actor | None, request: c.EnrollServer) -> Server:
        token, cmd = request.token, request.enrollment
        if not tokens.is_well_formed(token, tokens.ENROLL_PREFIX):
            raise Unauthorized(REFUSED)
        now = self._clock.now()
        async with self._uow() as uow:
            server = _usable(await uow.servers.by_enrollment(tokens.hash_token(token)), now)
            if server.status is not ServerStatus.PENDING:
                raise Unauthorized(REFUSED)
            address = server.address or _address(request.client_address)
            ssh_port = _ssh_port(server.ssh_port, cmd.ssh_port)
            if not await uow.servers.enroll(
                server.id,
                host_keys=cmd.host_keys,
                facts=cmd.facts,
                address=address,
                ssh_port=ssh_port,
            ):
                raise Unauthorized(REFUSED)  # enrolled by a concurrent request
            await uow.commit()
        log.info(
            "server_enrolled",
            server_id=str(server.id),
            owner_id=str(server.owner_id),
            host_keys=len(cmd.host_keys),
        )
        return msgspec.structs.replace(
            server,
            status=ServerStatus.OFFLINE,
            address=address,
            ssh_port=ssh_port,
            host_keys=cmd.host_keys,
            facts=cmd.facts,
        )


class EnrollmentStatus(UsesStoreAndClock):
    """The server of an enrollment token, for the install script before it enrolls.

    Allowed until the token is used or expires. Raises ``Unauthorized`` for a
    malformed, unknown, expired or used token (one reason for all). Callers show only
    the id, status and SSH port.
    """

    async def __call__(self, actor: Actor | None, cmd: c.EnrollmentStatus) -> Server:
        token = cmd.token
        if not tokens.is_well_formed(token, tokens.ENROLL_PREFIX):
            raise Unauthorized(REFUSED)
        async with self._uow() as uow:
            server = await uow.servers.by_enrollment(tokens.hash_token(token))
        found = _usable(server, self._clock.now())
        if found.status is not ServerStatus.PENDING:
            raise Unauthorized(REFUSED)
        return found


def _ssh_port(given: int, reported: int | None) -> int:
    """The port berth will connect to: the user's, unless it is the default."""
    if reported is None or reported == given:
        return given
    if given != DEFAULT_SSH_PORT:
        raise Conflict(
            f"This server was added with SSH port {given}; its install script reports "
            f"{reported}. Run the install command as berth shows it (with --ssh-port "
            f"{given}), or add the server again with the port berth should connect to.",
            field="ssh_port",
        )
    return reported


def _address(client_address: str | None) -> str | None:
    """The enrollment's source address, if it is one berth can connect to."""
    if client_address is None:
        return None
    try:
        return check_address(client_address)
    except RuleError:
        return None
