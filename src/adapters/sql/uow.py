"""The unit of work: every repository over one connection and one transaction."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from typing import Generic, Literal, Self, TypeVar, overload

from berth.core.events import Event
from berth.core.ports import SecretBox
from berth.core.unit_of_work import EventHandlers, RecordedEvents
from sqlalchemy.ext.asyncio import AsyncEngine

from .cache import read_cache
from .oauth import SqlOAuthRepository
from .pushes import SqlDeployHookRepository, SqlGitCredentialRepository
from .registries import SqlRegistryRepository
from .repositories import (
    SqlDeploymentRepository,
    SqlInstallationRepository,
    SqlServerRepository,
    SqlTokenRepository,
    SqlUserRepository,
)
from .sessions import SqlInviteRepository, SqlSessionRepository
from .teams import SqlAccessTokenRepository, SqlAuditRepository, SqlTeamRepository
from .transaction import Transaction, shared_write_lock
from .webhooks import SqlWebhookRepository

__all__ = ["SqlUnitOfWork", "SqlUnitOfWorkFactory", "unit_of_work"]

R = TypeVar("R")


class _made_on_use(Generic[R]):
    """A repository made on its first use in a unit of work, over its transaction (and,
    ``sealed``, the secret box it seals with), then an attribute of it:
    ``functools.cached_property`` without its lock (Python 3.11 takes an ``RLock`` at
    each first use: three per request). A unit of work is used by one task."""

    @overload
    def __init__(self, make: Callable[[Transaction], R]) -> None: ...

    @overload
    def __init__(
        self, make: Callable[[Transaction, SecretBox], R], *, sealed: Literal[True]
    ) -> None: ...

    def __init__(self, make: Callable[..., R], *, sealed: bool = False) -> None:
        self._make = make
        self._sealed = sealed
        self._name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    @overload
    def __get__(self, uow: None, owner: type | None = None) -> Self: ...

    @overload
    def __get__(self, uow: SqlUnitOfWork, owner: type | None = None) -> R: ...

    def __get__(self, uow: SqlUnitOfWork | None, owner: type | None = None) -> R | Self:
        if uow is None:
            return self
        tx = uow._transaction()
        made = self._make(tx, uow._box) if self._sealed else self._make(tx)
        uow.__dict__[self._name] = made
        return made


class SqlUnitOfWork:
    """``UnitOfWork`` over one pooled connection: nothing is written unless committed.

    Single use: ``async with`` it once. The repositories exist inside the block
    only, each made on its first use there. After a ``Conflict`` from a repository,
    leave the block (the transaction is rolled back) rather than carry on writing.

    The connection is taken on the first statement; with a ``cache`` (see
    ``cache.py``), the hot reads (a token, a server, its installations) are
    served from it while nothing has been committed since they were read.

    The events recorded in it go to ``events``' handlers when it commits
    (``berth.core.unit_of_work``).
    """

    def __init__(
        self, begin: Callable[[], Transaction], box: SecretBox, events: EventHandlers | None
    ) -> None:
        self._begin = begin
        self._box = box
        self._tx: Transaction | None = None
        self._events = RecordedEvents(events)

    async def __aenter__(self) -> Self:
        if self._tx is not None:
            raise RuntimeError("A unit of work is entered once.")
        self._tx = self._begin()
        return self

    # Each repository is made on first use, not on entering: a request's unit of work
    # uses one or two of them (made at each entering, all fifteen cost it 6 µs).

    users = _made_on_use(SqlUserRepository)
    tokens = _made_on_use(SqlTokenRepository)
    servers = _made_on_use(SqlServerRepository, sealed=True)
    installations = _made_on_use(SqlInstallationRepository, sealed=True)
    deployments = _made_on_use(SqlDeploymentRepository, sealed=True)
    sessions = _made_on_use(SqlSessionRepository)
    invites = _made_on_use(SqlInviteRepository)
    registries = _made_on_use(SqlRegistryRepository, sealed=True)
    webhooks = _made_on_use(SqlWebhookRepository, sealed=True)
    git_credentials = _made_on_use(SqlGitCredentialRepository, sealed=True)
    deploy_hooks = _made_on_use(SqlDeployHookRepository, sealed=True)
    teams = _made_on_use(SqlTeamRepository)
    access_tokens = _made_on_use(SqlAccessTokenRepository)
    audit = _made_on_use(SqlAuditRepository)
    oauth = _made_on_use(SqlOAuthRepository, sealed=True)

    async def __aexit__(self, *exc_info: object) -> None:
        """Roll back whatever was not committed and return the connection to the pool."""
        await self._transaction().close()

    @property
    def tx(self) -> Transaction:
        """The transaction, for the statements of the job queue and the fleet."""
        return self._transaction()

    def record(self, event: Event) -> None:
        self._events.record(event)

    async def commit(self) -> None:
        """Make everything written so far durable; later writes need another commit."""
        await self._events.commit(self, self._transaction().commit)

    def _transaction(self) -> Transaction:
        if self._tx is None:
            raise RuntimeError("Use the unit of work inside 'async with'.")
        return self._tx


class SqlUnitOfWorkFactory:
    """``UnitOfWorkFactory``: each call gives a new, not yet entered, ``SqlUnitOfWork``.

    On SQLite, the units of work of one engine (with the engine's job queue and
    fleet) write one at a time, in the order they asked (reads are never held
    up), and share the engine's read cache; use the engine from one event loop.
    """

    def __init__(
        self, engine: AsyncEngine, box: SecretBox, events: EventHandlers | None = None
    ) -> None:
        self.engine = engine
        self._box = box
        self._events = events
        self._begin = partial(Transaction, engine, shared_write_lock(engine), read_cache(engine))

    def __call__(self) -> SqlUnitOfWork:
        return SqlUnitOfWork(self._begin, self._box, self._events)


@asynccontextmanager
async def unit_of_work(
    engine: AsyncEngine, box: SecretBox, events: EventHandlers | None
) -> AsyncIterator[SqlUnitOfWork]:
    """One call of the job queue or the fleet: a unit of work (not cached: each call is a
    transaction of its own) committed if the block ends normally, its recorded events
    handed to ``events`` then; rolled back otherwise."""
    begin = partial(Transaction, engine, shared_write_lock(engine))
    async with SqlUnitOfWork(begin, box, events) as uow:
        yield uow
        await uow.commit()
