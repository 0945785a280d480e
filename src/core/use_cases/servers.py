"""Servers: create one (with a one-time enrollment token), list them, read one."""

from __future__ import annotations

import asyncio
from dataclasses import KW_ONLY, dataclass
from datetime import timedelta
from uuid import uuid4

import msgspec
import structlog

from .. import commands as c
from .. import tokens
from ..access import Actor
from ..errors import Conflict, CoreError, FieldError, InvalidInput, NotFound
from ..events import ServerRegistered
from ..models import WATCHED_STATUSES, DeploymentState, Server, ServerStatus, Transport
from ..outages import ThrottledWarning
from ..outbound import TargetRefused, check_server_address
from ..paging import matches_name
from ..ports import HostResolver, KeyGenerator, ServerGateway
from ..results import CreatedServer
from ..types import host_key_fingerprint
from .owned import ShowsServers, UsesStore, UsesStoreAndClock, audit, owned_server

__all__ = [
    "ENROLLMENT_TTL",
    "SERVERS_MAX",
    "ChangeServer",
    "CreateServer",
    "DeleteServer",
    "EnsureLocalServer",
    "GetServer",
    "ListServers",
    "NewEnrollmentToken",
    "RepinHostKeys",
    "register_local",
]

log = structlog.get_logger()

ENROLLMENT_TTL = timedelta(hours=1)
#: At most one warning a minute (the monitor asks every pass) that this machine's server
#: belongs to an account other than ``BERTH_LOCAL_OWNER``'s.
_held_by_another = ThrottledWarning("local_server_held_by_another_account", interval=60.0)
DEFAULT_SSH_USER = "berth"


#: Servers one team (a user's personal team, or a shared one) may add, unless the operator
#: says otherwise (BERTH_SERVERS_PER_USER).
SERVERS_MAX = 1000


@dataclass(eq=False)
class CreateServer(UsesStoreAndClock):
    """Register a server of the caller; it stays ``pending`` until it enrolls.

    Raises ``Conflict`` (``server-limit``) when the caller has ``max_servers`` already.
    Two creates racing for the last place may both get it: the limit bounds what one
    user can make berth hold, not an exact count.
    """

    _keys: KeyGenerator
    #: With a resolver, a loopback or link-local address is refused (``InvalidInput`` at
    #: ``address``): the operator set ``BERTH_ALLOW_PRIVATE_TARGETS=0``.
    _refuse_local: HostResolver | None = None
    _: KW_ONLY
    max_servers: int = SERVERS_MAX

    async def __call__(self, owner: Actor, cmd: c.CreateServerCommand) -> CreatedServer:
        if self._refuse_local is not None and cmd.address is not None:
            try:
                await check_server_address(self._refuse_local, cmd.address, cmd.ssh_port)
            except TargetRefused as exc:
                raise InvalidInput([FieldError("address", str(exc), cmd.address)]) from None
        now = self._clock.now()
        enrollment = tokens.generate(tokens.ENROLL_PREFIX)
        server_id = uuid4()
        private_key, public_key = self._keys.generate(f"berth@{server_id}")
        server = Server(
            id=server_id,
            owner_id=owner.team_id,
            name=cmd.name,
            transport=Transport.SSH,
            address=cmd.address,
            ssh_port=cmd.ssh_port,
            ssh_user=cmd.ssh_user,
            # With its host keys given, the server is enrolled: the monitor reaches it next.
            status=ServerStatus.OFFLINE if cmd.host_keys else ServerStatus.PENDING,
            created_at=now,
            enrollment_expires_at=now + ENROLLMENT_TTL,
            host_keys=cmd.host_keys,
            public_key=public_key,
        )
        async with self._uow() as uow:
            if await uow.servers.count(owner.scope) >= self.max_servers:
                # A personal team's refusal reads as it did before teams: the user's.
                personal = owner.team_id == owner.user.id
                who, one = ("You have", "user") if personal else ("The team has", "team")
                raise Conflict(
                    f"{who} {self.max_servers} servers, the most one {one} may add "
                    "(BERTH_SERVERS_PER_USER); delete one first.",
                    kind="server-limit",
                )
            await uow.servers.add(server, tokens.hash_token(enrollment), private_key)
            if server.host_keys:  # reachable at once: no enrollment to wait for
                uow.record(ServerRegistered(server_id=server.id))
            audit(uow, owner, "server.create", "server", server.id, server.name)
            await uow.commit()
        log.info("server_created", server_id=str(server.id), owner_id=str(owner.team_id))
        return CreatedServer(server=server, enrollment_token=enrollment)


class NewEnrollmentToken(UsesStoreAndClock):
    """Issue a fresh one-time enrollment token for a server that has not enrolled yet
    (its install command was lost, or its hour ran out); the previous token stops
    working at once.

    Raises ``NotFound`` for a server that is not the caller's, and ``Conflict``
    (``server-not-pending``) for one that enrolled already (or was created with its host
    keys): its keys are pinned, and a token would re-open nothing. Nothing is written then.
    """

    async def __call__(self, owner: Actor, cmd: c.NewEnrollmentToken) -> CreatedServer:
        enrollment = tokens.generate(tokens.ENROLL_PREFIX)
        expires = self._clock.now() + ENROLLMENT_TTL
        async with self._uow() as uow:
            server = await owned_server(uow, owner, cmd.server_id)
            renewed = server.status is ServerStatus.PENDING and await uow.servers.renew_enrollment(
                owner.scope, server.id, tokens.hash_token(enrollment), expires
            )
            if not renewed:
                raise Conflict(
                    f"Server {server.name!r} is {server.status.value}, not pending: it has "
                    "enrolled already, so it needs no install command.",
                    kind="server-not-pending",
                )
            audit(uow, owner, "server.enrollment_token", "server", server.id, server.name)
            await uow.commit()
        log.info("enrollment_token_renewed", server_id=str(server.id), owner_id=str(owner.team_id))
        renewed_server = msgspec.structs.replace(server, enrollment_expires_at=expires)
        return CreatedServer(server=renewed_server, enrollment_token=enrollment)


#: One registration at a time in this process: the monitor's loop and the first sign-up
#: may both ask, and the read-then-insert below must not run twice at once.
_REGISTERING = asyncio.Lock()


@dataclass(eq=False)
class EnsureLocalServer(UsesStoreAndClock):
    """Give this machine's owner a server for it (``berth serve --local``), once; the
    monitor checks it at once (``ServerRegistered``).

    The owner is the account ``owner_email`` names (``BERTH_LOCAL_OWNER``), else the
    first account. Whoever owns it is trusted like the operator: an app with a host path
    is root on this machine (docs/security.md). The server is never given to a second
    account: while another account holds it (registered before ``owner_email`` was set),
    nothing is registered and a warning says how to hand it over.
    """

    _: KW_ONLY
    owner_email: str | None = None

    async def __call__(self) -> Server | None:
        async with _REGISTERING, self._uow() as uow:
            if self.owner_email is not None:
                owner = await uow.users.get_by_email(self.owner_email.strip().lower())
            else:
                owner = await uow.users.first()
            if owner is None:
                return None
            for server in await uow.servers.list(owner.id):  # their personal team's
                if server.transport is Transport.LOCAL:
                    return server
            held = [s for s in await uow.servers.of_this_machine() if s.owner_id != owner.id]
            if held:
                _held_by_another.warn(
                    local_owner=owner.email,
                    holder_id=str(held[0].owner_id),
                    server_id=str(held[0].id),
                    fix="start berth once without --local, delete that server (its apps "
                    "keep running), then start it again with --local",
                )
                return None
            server = Server(
                id=uuid4(),
                owner_id=owner.id,
                name="local",
                transport=Transport.LOCAL,
                address="127.0.0.1",
                ssh_port=22,
                ssh_user=DEFAULT_SSH_USER,
                status=ServerStatus.OFFLINE,
                created_at=self._clock.now(),
            )
            await uow.servers.add(server, None)
            uow.record(ServerRegistered(server_id=server.id))
            await uow.commit()
        log.info("local_server_registered", server_id=str(server.id), owner_id=str(owner.id))
        return server


async def register_local(ensure: EnsureLocalServer | None) -> None:
    """Register this machine (``serve --local``: ``ensure`` is given) as soon as its
    owner (the first account, or ``BERTH_LOCAL_OWNER``'s) exists, so the first page they
    see lists it."""
    if ensure is None:
        return
    try:
        await ensure()
    except CoreError as exc:  # the account exists: the monitor's next pass registers it
        log.warning("local_server_not_registered_yet", reason=exc.detail)


class ListServers(ShowsServers):
    """The caller's servers, oldest first; only those whose status as shown is
    ``cmd.status`` and whose name holds ``cmd.name`` (any case), when given."""

    async def __call__(self, owner: Actor, cmd: c.ListServers) -> list[Server]:
        async with self._uow() as uow:
            servers = await uow.servers.list(owner.scope)
        shown = (self._shown(server) for server in servers)
        return [
            server
            for server in shown
            if (cmd.status is None or server.status is cmd.status)
            and matches_name(server.name, cmd.name)
        ]


class GetServer(ShowsServers):
    """One of the caller's servers."""

    async def __call__(self, owner: Actor, cmd: c.GetServer) -> Server:
        async with self._uow() as uow:
            return self._shown(await owned_server(uow, owner, cmd.server_id))


@dataclass(eq=False)
class ChangeServer(ShowsServers):
    """Change a server's name, address or SSH port in place: its id, installations and
    history stay. A new address or port sends a watched server back to ``offline`` and
    tells the monitor (``ServerRegistered``), which checks it there at once with the pinned
    host keys; a pending server keeps waiting for its install script.

    Raises ``NotFound`` for a server that is not the caller's; ``InvalidInput`` at
    ``address`` for a loopback or link-local address when the operator refuses them
    (as ``CreateServer``). Nothing is written then.
    """

    _refuse_local: HostResolver | None = None

    async def __call__(self, owner: Actor, cmd: c.ChangeServer) -> Server:
        async with self._uow() as uow:
            server = await owned_server(uow, owner, cmd.server_id)
        changed = msgspec.structs.replace(
            server,
            name=server.name if cmd.name is None else cmd.name,
            address=server.address if cmd.address is None else cmd.address,
            ssh_port=server.ssh_port if cmd.ssh_port is None else cmd.ssh_port,
        )
        moved = (changed.address, changed.ssh_port) != (server.address, server.ssh_port)
        if moved and self._refuse_local is not None and changed.address is not None:
            try:
                await check_server_address(self._refuse_local, changed.address, changed.ssh_port)
            except TargetRefused as exc:
                raise InvalidInput([FieldError("address", str(exc), changed.address)]) from None
        recheck = moved and server.status in WATCHED_STATUSES
        async with self._uow() as uow:
            written = await uow.servers.change(
                owner.scope,
                server.id,
                name=changed.name,
                address=changed.address,
                ssh_port=changed.ssh_port,
                recheck=moved,
            )
            if not written:
                raise NotFound("Server not found.")
            if recheck:
                uow.record(ServerRegistered(server_id=server.id))
            audit(uow, owner, "server.change", "server", server.id, changed.name)
            await uow.commit()
            changed = await owned_server(uow, owner, server.id)
        log.info(
            "server_changed", server_id=str(server.id), owner_id=str(owner.team_id), moved=moved
        )
        return self._shown(changed)


@dataclass(eq=False)
class DeleteServer(UsesStore):
    """Forget one of the caller's servers: its record, installations, deployments and
    snapshot. Nothing on the server is touched: its containers keep running.

    Raises ``NotFound`` for a server that is not the caller's, and ``Conflict`` while
    one of its deployments is running, or for this machine's server while berth
    manages it (``berth serve --local`` would register it again at once).
    """

    _gateway: ServerGateway | None
    _: KW_ONLY
    local_managed: bool

    async def __call__(self, owner: Actor, cmd: c.DeleteServer) -> None:
        server_id = cmd.server_id
        async with self._uow() as uow:
            # Locked first, as a deploy does: the two take turns on one server.
            server = await uow.servers.lock(owner.scope, server_id)
            if server is None:
                raise NotFound("Server not found.")
            if server.transport is Transport.LOCAL and self.local_managed:
                raise Conflict(
                    "This machine is the one berth runs on, and berth manages it for as "
                    "long as it runs with --local: it cannot be removed here. Whoever "
                    "runs berth stops managing it by restarting berth without --local."
                )
            for installation in await uow.installations.list(owner.scope, server_id):
                for active in await uow.deployments.active(owner.scope, installation.id):
                    if active.state is DeploymentState.RUNNING:
                        raise Conflict(
                            f"Deployment {active.id} on this server is running; "
                            "wait for it to finish."
                        )
            if not await uow.servers.delete(owner.scope, server_id):
                raise NotFound("Server not found.")
            audit(uow, owner, "server.delete", "server", server_id, server.name)
            await uow.commit()
        if self._gateway is not None:
            await self._gateway.disconnect(server_id)
        log.info("server_deleted", server_id=str(server_id), owner_id=str(owner.team_id))


@dataclass(eq=False)
class RepinHostKeys(UsesStore):
    """Accept a server's new SSH host key after a legitimate change (a reinstall, new
    keys), and only the key berth saw: the user confirms its fingerprint, and the keys
    given must include it. The server goes ``offline``; the old pooled connection, if
    any, is dropped, and the monitor reconnects with the new keys.

    Raises ``NotFound`` for a server that is not the caller's; ``Conflict``
    (``no-host-key-change``) when the server is not in ``host_key_mismatch`` (nothing
    to confirm), ``Conflict`` (``fingerprint-mismatch``, field ``fingerprint``) when the
    confirmed fingerprint is not the offered key's, and ``Conflict``
    when the keys given do not include the offered key (``fingerprint-mismatch``,
    field ``host_keys``). Nothing is written then.
    """

    _gateway: ServerGateway | None

    async def __call__(self, owner: Actor, cmd: c.RepinHostKeys) -> Server:
        async with self._uow() as uow:
            server = await owned_server(uow, owner, cmd.server_id)
            offered = server.offered_host_key
            if server.status is not ServerStatus.HOST_KEY_MISMATCH or offered is None:
                raise Conflict(
                    f"Server {server.name!r} has not offered a new SSH host key "
                    f"(status {server.status.value}): there is nothing to confirm.",
                    kind="no-host-key-change",
                )
            seen = host_key_fingerprint(offered)
            if cmd.fingerprint != seen:
                raise Conflict(
                    f"The fingerprint {cmd.fingerprint} is not that of the key the server "
                    f"offered ({seen}); compare it with `ssh-keygen -lf` on the server.",
                    kind="fingerprint-mismatch",
                    field="fingerprint",
                )
            offered_line = " ".join(offered.split()[:2])
            if offered_line not in cmd.host_keys:
                raise Conflict(
                    f"The host keys given do not include the key the server offered ({seen}).",
                    kind="fingerprint-mismatch",
                    field="host_keys",
                )
            if not await uow.servers.repin(
                owner.scope, server.id, host_keys=cmd.host_keys, offered=offered
            ):
                raise Conflict(
                    f"Server {server.name!r} changed meanwhile; read it again and confirm "
                    "the key it offers now.",
                    kind="no-host-key-change",
                )
            audit(uow, owner, "server.repin", "server", server.id, server.name, detail=seen)
            await uow.commit()
        repinned = msgspec.structs.replace(
            server,
            status=ServerStatus.OFFLINE,
            status_detail="Host keys re-pinned; berth reconnects with the new key.",
            host_keys=cmd.host_keys,
            offered_host_key=None,
        )
        if self._gateway is not None:
            await self._gateway.disconnect(server.id)
        log.info(
            "server_host_keys_repinned",
            server_id=str(server.id),
            owner_id=str(owner.team_id),
            fingerprint=seen,
        )
        return repinned
