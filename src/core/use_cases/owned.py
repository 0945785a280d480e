"""What many use cases share: the store (and the clock, or the servers), and "the
caller's X, or NotFound".

Ownership is the store's (every repository method takes the owner); these only
turn "not found among yours" into the one ``NotFound`` the API answers 404 with.
"""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass
from datetime import timedelta
from typing import ClassVar, Generic, Protocol, TypeVar
from uuid import UUID

import structlog

from ..access import Actor, Owner
from ..errors import Conflict, NotFound
from ..events import Audited
from ..models import ContainerState, Installation, Server, ServerStatus
from ..ports import Clock, ServerConnection, ServerGateway, UnitOfWork, UnitOfWorkFactory
from ..teams import AuditTarget

__all__ = [
    "ForgetOwned",
    "ListOwned",
    "ShowsServers",
    "UsesServers",
    "UsesStore",
    "UsesStoreAndClock",
    "audit",
    "owned_installation",
    "owned_server",
    "refuse_pending",
]

log = structlog.get_logger()

T = TypeVar("T")


# A use case's dependencies (ports) are its dataclass fields, in the order the composition
# root passes them; a subclass adds its own after its base's. ``eq=False``: a use case is
# itself, compared and hashed by identity.


@dataclass(eq=False)
class UsesStore:
    """A use case that needs the store and nothing else."""

    _uow: UnitOfWorkFactory


@dataclass(eq=False)
class UsesStoreAndClock(UsesStore):
    """A use case that needs the store and the time."""

    _clock: Clock


@dataclass(eq=False)
class ShowsServers(UsesStoreAndClock):
    """A use case that hands servers to a reader as the reader should see them
    (``Server.shown``): a status no worker stood by within ``fresh_for`` reads
    ``checking`` (the default: ``status_fresh_for`` of the default 5 s interval)."""

    _: KW_ONLY
    fresh_for: timedelta = timedelta(seconds=30)

    def _shown(self, server: Server) -> Server:
        return server.shown(self._clock.now(), self.fresh_for)


class Listing(Protocol[T]):
    """A repository of owned things that lists one owner's."""

    async def list(self, owner_id: Owner) -> list[T]: ...


class Forgetting(Protocol):
    """A repository of owned things that deletes one of an owner's (``False``: none such)."""

    async def delete(self, owner_id: Owner, item_id: UUID, /) -> bool: ...


def _repository_named(name: str) -> str:
    """``name`` if the unit of work has a repository by that name (checked at import)."""
    if not isinstance(getattr(UnitOfWork, name, None), property):
        raise TypeError(f"the unit of work has no repository {name!r}")
    return name


@dataclass(eq=False)
class ListOwned(UsesStore, Generic[T]):
    """The caller's things of one kind, in their repository's order. A subclass names the
    unit of work's repository: ``class ListServers(ListOwned[Server], repository="servers")``.
    """

    _repository: ClassVar[str]

    def __init_subclass__(cls, *, repository: str = "", **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        cls._repository = _repository_named(repository)

    async def __call__(self, owner: Actor, cmd: object) -> list[T]:
        async with self._uow() as uow:
            found: Listing[T] = getattr(uow, self._repository)
            return await found.list(owner.scope)


@dataclass(eq=False)
class ForgetOwned(UsesStore):
    """Delete one of the caller's things of one kind; ``NotFound`` if it is not theirs.

    A subclass names the repository, the thing (for the 404, the log's ``<noun>_id`` and
    the command's field that names it) and the log event: ``class DeleteWebhook(ForgetOwned,
    repository="webhooks", noun="webhook", event="webhook_deleted")``; ``missing`` (the
    404's words, ``Webhook``) and ``audited_as`` (the audit log's kind) when the noun's
    own do not read well.
    """

    _repository: ClassVar[str]
    _noun: ClassVar[str]
    _event: ClassVar[str]
    _verb: ClassVar[str]
    _missing: ClassVar[str]
    _audited_as: ClassVar[str]

    def __init_subclass__(
        cls,
        *,
        repository: str = "",
        noun: str = "",
        event: str = "",
        verb: str = "delete",
        missing: str = "",
        audited_as: str = "",
        **kwargs: object,
    ) -> None:
        super().__init_subclass__(**kwargs)
        cls._repository, cls._noun, cls._event = _repository_named(repository), noun, event
        cls._verb = verb  # the audit log's action: ``<audited_as>.<verb>``
        cls._missing = missing or noun.capitalize()
        cls._audited_as = audited_as or noun

    async def __call__(self, owner: Actor, cmd: object) -> None:
        item_id: UUID = getattr(cmd, f"{self._noun}_id")
        async with self._uow() as uow:
            found: Forgetting = getattr(uow, self._repository)
            if not await found.delete(owner.scope, item_id):
                raise NotFound(f"{self._missing} not found.")
            audit(uow, owner, f"{self._audited_as}.{self._verb}", self._audited_as, item_id)
            await uow.commit()
        log.info(self._event, **{f"{self._noun}_id": str(item_id), "owner_id": str(owner.team_id)})


@dataclass(eq=False)
class UsesServers(UsesStore):
    """A use case that reads the caller's server from the store, then asks the server."""

    _gateway: ServerGateway

    async def _connect(self, server: Server) -> ServerConnection:
        """The connection to ``server``; a 409 ``server-pending`` (never contacted) for one
        that has not enrolled, which has no host key to check and nothing to read."""
        refuse_pending(server)
        return await self._gateway.connect(server)

    async def _current_container(
        self, owner: Actor, installation_id: UUID
    ) -> tuple[Installation, tuple[ServerConnection, ContainerState] | None]:
        """The caller's installation and its container (the running one, else the newest)
        with the connection to its server; no container if it has none, or was removed
        (its server is then not asked)."""
        async with self._uow() as uow:
            server, installation = await owned_installation(uow, owner, installation_id)
        if installation.removed_at is not None:  # its containers are gone: nothing to ask
            return installation, None
        conn = await self._connect(server)
        containers = await conn.docker.find({"berth.installation": str(installation.id)})
        if not containers:
            return installation, None
        return installation, (conn, next((c for c in containers if c.running), containers[0]))


def refuse_pending(server: Server, field: str | None = None) -> None:
    """A server that has not enrolled is a 409 ``server-pending`` for every call that would
    ask it something (a read as a deploy): one answer, naming ``field`` if an input chose it."""
    if server.status is ServerStatus.PENDING:
        raise Conflict(
            f"Server {server.name!r} has not enrolled yet: run its install command on the "
            "server (or create it with its host keys), then retry.",
            kind="server-pending",
            field=field,
        )


async def owned_server(uow: UnitOfWork, owner: Actor, server_id: UUID) -> Server:
    """The owner's server ``server_id``; ``NotFound`` if it is not theirs."""
    server = await uow.servers.get(owner.scope, server_id)
    if server is None:
        raise NotFound("Server not found.")
    return server


async def owned_installation(
    uow: UnitOfWork, owner: Actor, installation_id: UUID
) -> tuple[Server, Installation]:
    """The owner's installation ``installation_id`` and its server; ``NotFound`` if not theirs."""
    installation = await uow.installations.get(owner.scope, installation_id)
    server = await uow.servers.get(owner.scope, installation.server_id) if installation else None
    if installation is None or server is None:
        raise NotFound("Installation not found.")
    return server, installation


def audit(
    uow: UnitOfWork,
    actor: Actor,
    action: str,
    kind: str,
    item_id: object,
    name: str | None = None,
    *,
    detail: str | None = None,
) -> None:
    """Record on ``uow`` that ``actor`` did ``action`` to the ``kind`` ``item_id``: an
    entry of the team's audit log, written in ``uow``'s transaction if it commits."""
    target = AuditTarget(type=kind, id=str(item_id), name=name)
    uow.record(Audited.of(actor, action, target, detail=detail))
