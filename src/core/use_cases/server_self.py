"""A server speaking for itself: requests signed with one of its pinned SSH host keys.

Once enrolled, the install script holds no credential of berth's (the enrollment
token is spent), but it holds the server's SSH host private keys, whose public
halves berth pinned at enrollment. A request signed with one of them
(``ssh-keygen -Y sign -n berth-server@berth``) over its method, path, the server's
id and the time proves that it comes from that server. With it the script reads
its server's status (while it waits for ``online``) and reports ``--uninstall``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from uuid import UUID

import msgspec
import structlog

from .. import commands as c
from ..access import Actor
from ..commands import ServerSignature
from ..errors import SIGNATURE_REFUSED, Unauthorized
from ..models import Server, ServerStatus
from ..ports import HostKeySignatures, ServerGateway
from .owned import UsesStoreAndClock

__all__ = [
    "MAX_CLOCK_SKEW",
    "SIGNATURE_NAMESPACE",
    "ReportUninstalled",
    "ServerSelfStatus",
    "signed_message",
]

log = structlog.get_logger()

#: The ``-n`` of ``ssh-keygen -Y sign``: a signature for berth is good for nothing else.
SIGNATURE_NAMESPACE = "berth-server@berth"
#: How far the signing time may be from berth's clock, either way.
MAX_CLOCK_SKEW = timedelta(minutes=5)


def signed_message(method: str, path: str, server_id: UUID, signed_at: int) -> bytes:
    """The bytes a server signs for a request (the install script writes the same)."""
    return f"berth-server-request\n{method}\n{path}\n{server_id}\n{signed_at}\n".encode()


@dataclass(eq=False)
class _SignedRequests(UsesStoreAndClock):
    """A use case a server asks for itself, with a request signed by one of its host keys."""

    _signatures: HostKeySignatures

    async def _signer(self, sig: ServerSignature) -> Server:
        """The server that signed ``sig``, else ``Unauthorized``."""
        skew = abs(self._clock.now().timestamp() - sig.signed_at)
        if skew > MAX_CLOCK_SKEW.total_seconds():
            raise Unauthorized(SIGNATURE_REFUSED)
        async with self._uow() as uow:
            server = await uow.servers.speaking_for_itself(sig.server_id)
        if server is None or not server.host_keys:
            raise Unauthorized(SIGNATURE_REFUSED)
        message = signed_message(sig.method, sig.path, sig.server_id, sig.signed_at)
        if not self._signatures.verify(
            server.host_keys, SIGNATURE_NAMESPACE, message, sig.signature
        ):
            raise Unauthorized(SIGNATURE_REFUSED)
        return server


class ServerSelfStatus(_SignedRequests):
    """The status of the server that signed the request (``Unauthorized`` otherwise)."""

    async def __call__(self, actor: Actor | None, cmd: c.ServerSelfStatus) -> Server:
        return await self._signer(cmd.signature)


@dataclass(eq=False)
class ReportUninstalled(_SignedRequests):
    """The server's install script ran ``--uninstall``: berth's key is gone from it.

    The server becomes ``removed`` (the monitor leaves it alone, deploys are refused
    with ``server-removed``) and berth drops its pooled connection to it. Idempotent:
    a second report changes nothing. Raises ``Unauthorized`` unless the request is
    signed with one of the server's pinned host keys.
    """

    _gateway: ServerGateway

    async def __call__(self, actor: Actor | None, cmd: c.ReportUninstalled) -> Server:
        server = await self._signer(cmd.signature)
        now = self._clock.now()
        detail = f"Uninstalled by its install script at {now:%Y-%m-%d %H:%M:%S} UTC."
        async with self._uow() as work:
            changed = await work.servers.mark_removed(server.id, detail)
            await work.commit()
        await self._gateway.disconnect(server.id)
        if changed:
            log.info("server_uninstalled", server_id=str(server.id), owner_id=str(server.owner_id))
            server = msgspec.structs.replace(
                server, status=ServerStatus.REMOVED, status_detail=detail
            )
        return server
