"""Credentials saved per host (a private registry's, a Git host's): one kind of use case
for both, its words and limits the kind's (``HostKind``).

The password is sealed by the store and never read back here: only the worker unseals
it (the repository's ``auth``), for a pull from or a fetch from that host.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Generic, Protocol, TypeVar, cast
from uuid import uuid4

import structlog

from .. import commands as c
from ..access import Actor, Owner
from ..errors import Conflict, WriteConflict
from ..models import HostCredentials
from .owned import UsesStoreAndClock, _repository_named, audit

__all__ = ["AddHostCredentials", "HostKind"]

log = structlog.get_logger()

S = TypeVar("S", bound=HostCredentials)


@dataclass(frozen=True)
class HostKind:
    """A kind of credentials saved per host: the unit of work's repository, the name the
    audit log and the problem kinds (``<name>-exists``, ``<name>-limit``) give it, how many
    one team may save, and the refusals' words (``{host}``, ``{most}`` filled in)."""

    repository: str
    name: str
    most: int
    exists: str
    limit: str


class _Saving(Protocol[S]):
    async def add(self, saved: S, password: str, /) -> None: ...
    async def list(self, owner_id: Owner, /) -> list[S]: ...
    async def by_host(self, owner_id: Owner, host: str, /) -> S | None: ...


@dataclass(eq=False)
class AddHostCredentials(UsesStoreAndClock, Generic[S]):
    """Save the team's credentials for a host: ``S`` (its id, owner, host, user name and
    time) is what the kind's repository keeps beside the sealed password.

    Raises ``Conflict`` (``<name>-exists``, at ``host``) if the team has some for that
    host already (remove them first to change them), or (``<name>-limit``) past the
    kind's ``most``. A subclass names its record and kind:
    ``class AddRegistry(AddHostCredentials[Registry], saved=Registry, kind=REGISTRIES)``.
    """

    _saved: ClassVar[type[HostCredentials]]
    _kind: ClassVar[HostKind]

    def __init_subclass__(
        cls, *, saved: type[HostCredentials], kind: HostKind, **kwargs: object
    ) -> None:
        super().__init_subclass__(**kwargs)
        _repository_named(kind.repository)
        cls._saved, cls._kind = saved, kind

    async def __call__(self, owner: Actor, cmd: c.AddHostCredentials[S]) -> S:
        kind = self._kind
        saved_id = uuid4()
        made = self._saved(
            id=saved_id,
            owner_id=owner.team_id,
            host=cmd.host,
            username=cmd.username,
            created_at=self._clock.now(),
        )
        credentials = cast(S, made)  # ``_saved`` is the subclass's ``S``
        exists = Conflict(
            kind.exists.format(host=cmd.host), kind=f"{kind.name}-exists", field="host"
        )
        async with self._uow() as uow:
            repository: _Saving[S] = getattr(uow, kind.repository)
            if await repository.by_host(owner.scope, cmd.host) is not None:
                raise exists
            if len(await repository.list(owner.scope)) >= kind.most:
                raise Conflict(kind.limit.format(most=kind.most), kind=f"{kind.name}-limit")
            try:
                await repository.add(credentials, cmd.password)
            except WriteConflict:  # a concurrent request saved this host first
                raise exists from None
            audit(uow, owner, f"{kind.name}.add", kind.name, saved_id, cmd.host)
            await uow.commit()
        noun = kind.name.replace("-", "_")
        log.info(
            f"{noun}_added",
            **{f"{noun}_id": str(saved_id)},
            owner_id=str(owner.team_id),
            host=cmd.host,
        )
        return credentials
