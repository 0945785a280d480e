"""Keep every server's status, facts and container snapshot current, and its reverse
proxy's configuration equal to the routes berth holds for it."""

from __future__ import annotations

import asyncio
from uuid import UUID

import structlog

from ..errors import HostKeyMismatch, RuntimeFailure, ServerUnreachable
from ..models import ContainerSnapshot, Server, ServerStatus
from ..ports import Clock, Fleet, ServerConnection, ServerGateway
from ..types import host_key_fingerprint
from .routes import RouteTable

__all__ = ["HOST_KEY_MISMATCH", "MonitorServers", "fingerprints", "mismatch_detail"]

log = structlog.get_logger()

#: How an offline server's detail starts when its host key is not the pinned one.
HOST_KEY_MISMATCH = "Host key mismatch"


def fingerprints(keys: tuple[str, ...]) -> list[str]:
    """The SHA-256 fingerprints of ``keys`` (OpenSSH format); a key that does not decode
    is left out."""
    found = []
    for key in keys:
        try:
            found.append(host_key_fingerprint(key))
        except ValueError:
            continue
    return found


def mismatch_detail(pinned: tuple[str, ...], offered: str | None, why: str) -> str:
    """The status detail of a server whose host key changed: both fingerprints, and how
    to accept the new key."""
    old = ", ".join(fingerprints(pinned)) or "none"
    if offered is None:
        return f"{HOST_KEY_MISMATCH}: refusing to connect ({why}). Pinned: {old}."
    new = ", ".join(fingerprints((offered,))) or "unreadable"
    return (
        f"{HOST_KEY_MISMATCH}: the server offered {new}; pinned: {old}. berth will not "
        "connect until the new key is confirmed (POST …/host-keys, `berth servers repin`, "
        "or the server's page)."
    )


class MonitorServers:
    """One pass over the fleet: reach each server, record online/offline with facts.

    With ``routes``, each online server's proxy is also checked: when its live
    configuration differs from the server's routes (the proxy restarted, or was edited
    by hand), the routes are loaded again (logged ``proxy_reapplied``). A proxy that
    cannot be reached or refuses is logged once per change of reason, never raised.
    """

    def __init__(
        self,
        fleet: Fleet,
        gateway: ServerGateway,
        clock: Clock,
        *,
        timeout: float = 10.0,
        routes: RouteTable | None = None,
    ) -> None:
        self._fleet = fleet
        self._gateway = gateway
        self._clock = clock
        self._timeout = timeout
        self._routes = routes
        self._proxy_problems: dict[UUID, str] = {}

    async def __call__(self) -> None:
        servers = await self._fleet.servers()
        await asyncio.gather(*(self._check(server) for server in servers))

    async def _check(self, server: Server) -> None:
        try:
            async with asyncio.timeout(self._timeout):
                conn = await self._gateway.connect(server)
                facts = await conn.docker.facts()
                containers = await conn.docker.list_containers()
        except HostKeyMismatch as exc:
            await self._mismatch(server, exc)
        except (ServerUnreachable, RuntimeFailure, TimeoutError) as exc:
            detail = getattr(exc, "detail", None) or "No answer in time."
            await self._offline(server, f"Unreachable: {detail}")
        else:
            now = self._clock.now()
            await self._fleet.set_status(server.id, ServerStatus.ONLINE, now, facts=facts)
            await self._fleet.save_snapshot(
                ContainerSnapshot(
                    server_id=server.id, observed_at=now, containers=tuple(containers)
                )
            )
            if server.status is not ServerStatus.ONLINE:
                log.info("server_online", server_id=str(server.id))
            await self._converge(server, conn)

    async def _converge(self, server: Server, conn: ServerConnection) -> None:
        """Load the server's routes again if its proxy's configuration drifted."""
        if self._routes is None:
            return
        try:
            async with asyncio.timeout(self._timeout):
                reapplied = await self._routes.converge(server.id, conn.proxy)
        except (ServerUnreachable, RuntimeFailure, TimeoutError) as exc:
            detail = getattr(exc, "detail", None) or "No answer in time."
            if self._proxy_problems.get(server.id) != detail:
                self._proxy_problems[server.id] = detail
                log.warning("proxy_not_converged", server_id=str(server.id), detail=detail)
            return
        if self._proxy_problems.pop(server.id, None) is not None:
            log.info("proxy_reachable", server_id=str(server.id))
        if reapplied:
            log.info("proxy_reapplied", server_id=str(server.id))

    async def _mismatch(self, server: Server, exc: HostKeyMismatch) -> None:
        """The server offered another host key: ``host_key_mismatch``, with the pinned
        and offered fingerprints in the detail, until the user re-pins."""
        await self._gateway.disconnect(server.id)
        if exc.offered_key is not None:
            # Re-pinned while this check ran: the next pass connects with the new keys.
            now_pinned = await self._fleet.credentials(server.id)
            offered = " ".join(exc.offered_key.split()[:2])
            if now_pinned is not None and offered in now_pinned.host_keys:
                return
        detail = mismatch_detail(server.host_keys, exc.offered_key, exc.detail)
        await self._fleet.set_status(
            server.id,
            ServerStatus.HOST_KEY_MISMATCH,
            self._clock.now(),
            detail=detail,
            offered_host_key=exc.offered_key,
        )
        if server.status is not ServerStatus.HOST_KEY_MISMATCH or server.status_detail != detail:
            log.warning("server_host_key_mismatch", server_id=str(server.id), detail=detail)

    async def _offline(self, server: Server, detail: str) -> None:
        await self._gateway.disconnect(server.id)
        await self._fleet.set_status(
            server.id, ServerStatus.OFFLINE, self._clock.now(), detail=detail
        )
        if server.status is not ServerStatus.OFFLINE or server.status_detail != detail:
            log.info("server_offline", server_id=str(server.id), detail=detail)
