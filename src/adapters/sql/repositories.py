"""The repositories of ``berth.core.ports``, over one shared transaction.

Ownership is part of every query: each statement that reads or writes a
server, installation, deployment or snapshot carries ``owner_id = :owner`` in
its WHERE clause (or inserts only if the parent row has that owner), so a row
of another user is indistinguishable from a missing one.

Statements are SQLAlchemy Core, not ORM object loading: rows become core
Structs in the ``_*_to_core`` functions. Env values are only ever stored
sealed with the ``SecretBox``.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from functools import partial
from typing import Any, NoReturn, cast
from uuid import UUID

import msgspec
from berth.core.errors import NotFound, WriteConflict
from berth.core.lifecycle import ACTIVE, sources
from berth.core.models import (
    ApiToken,
    Container,
    ContainerSnapshot,
    Deployment,
    DeploymentEvent,
    DeploymentRef,
    DeploymentSpec,
    DeploymentState,
    Installation,
    InstallationStatus,
    Server,
    ServerFacts,
    ServerStatus,
    Transport,
    User,
)
from berth.core.ports import SecretBox
from sqlalchemy import (
    ColumnElement,
    Row,
    Select,
    Table,
    bindparam,
    delete,
    insert,
    literal,
    select,
    update,
)
from sqlalchemy.exc import IntegrityError
from sqlalchemy.sql.dml import Insert

from . import dialect
from .tables import (
    ApiTokenRow,
    ContainerSnapshotRow,
    DeploymentEventRow,
    DeploymentRow,
    InstallationRow,
    ServerRow,
    UserRow,
)
from .transaction import Transaction

__all__ = [
    "SqlDeploymentRepository",
    "SqlInstallationRepository",
    "SqlServerRepository",
    "SqlTokenRepository",
    "SqlUserRepository",
]

users_t = cast(Table, UserRow.__table__)
tokens_t = cast(Table, ApiTokenRow.__table__)
servers_t = cast(Table, ServerRow.__table__)
installations_t = cast(Table, InstallationRow.__table__)
deployments_t = cast(Table, DeploymentRow.__table__)
events_t = cast(Table, DeploymentEventRow.__table__)
snapshots_t = cast(Table, ContainerSnapshotRow.__table__)

_ACTIVE_STATES = tuple(sorted(state.value for state in ACTIVE))
# The same as one bound parameter each: ``IN (?, ?)`` compiled once, where a plain list
# is an "expanding" parameter that SQLAlchemy re-renders into the SQL at every execution.
_ACTIVE_STATE_PARAMS = [literal(state) for state in _ACTIVE_STATES]
_DEPLOYMENT_STATES = {state.value: state for state in DeploymentState}

# What read queries select: what the core needs, never the sealed secrets.
_SERVER_COLUMNS = [c for c in servers_t.c if c.name != "private_key_sealed"]
_INSTALLATION_COLUMNS = [c for c in installations_t.c if c.name not in ("env_sealed", "owner_id")]
_DEPLOYMENT_COLUMNS = [c for c in deployments_t.c if c.name not in ("env_sealed", "owner_id")]


def _installations_where(*where: ColumnElement[bool], with_server_id: bool = True) -> Select[Any]:
    """The owner's installations matching ``where``, each with what its status derives from.

    One query: correlated subqueries, each an index seek into the installation's
    deployments, give its newest deployment (joined for id, state and end time),
    whether any deployment is active, and the state of its newest finished one.
    Without ``with_server_id`` (``where`` fixes the server), the server id is left out.
    """
    i = installations_t.c
    d = deployments_t.alias("d").c
    of_this = (d.installation_id == i.id, d.owner_id == i.owner_id)
    newest_first = (d.created_at.desc(), d.id.desc())
    newest_id = select(d.id).where(*of_this).order_by(*newest_first).limit(1).scalar_subquery()
    newest_final_state = (
        select(d.state)
        .where(*of_this, d.state.not_in(_ACTIVE_STATE_PARAMS))
        .order_by(*newest_first)
        .limit(1)
        .scalar_subquery()
    )
    any_active = select(d.id).where(*of_this, d.state.in_(_ACTIVE_STATE_PARAMS)).exists()
    last = deployments_t.alias("last")
    columns = [c for c in _INSTALLATION_COLUMNS if with_server_id or c.name != "server_id"]
    return (
        select(
            *columns,
            last.c.id.label("last_id"),
            last.c.state.label("last_state"),
            last.c.finished_at.label("last_finished_at"),
            any_active.label("any_active"),
            newest_final_state.label("last_final_state"),
        )
        .outerjoin_from(installations_t, last, last.c.id == newest_id)
        .where(i.owner_id == bindparam("owner_id"), *where)
        .order_by(i.created_at, i.id)
    )


# Statements on hot paths (every request authenticates; listing is benchmarked) are
# built once with named parameters: SQLAlchemy then reuses their compiled form.
_SERVER_BY_ID = select(*_SERVER_COLUMNS).where(
    servers_t.c.id == bindparam("server_id"), servers_t.c.owner_id == bindparam("owner_id")
)
_TOKEN_WITH_USER = (
    select(
        users_t.c.id,
        users_t.c.email,
        users_t.c.password_hash,
        users_t.c.created_at,
        tokens_t.c.user_id,
        tokens_t.c.token_hash,
        tokens_t.c.prefix,
        tokens_t.c.created_at.label("token_created_at"),
        tokens_t.c.last_used_at,
    )
    .join_from(tokens_t, users_t, tokens_t.c.user_id == users_t.c.id)
    .where(tokens_t.c.token_hash == bindparam("token_hash"))
)
_INSTALLATIONS_OF_SERVER = _installations_where(
    installations_t.c.server_id == bindparam("server_id"), with_server_id=False
)
_INSTALLATION_BY_ID = _installations_where(installations_t.c.id == bindparam("installation_id"))
_INSTALLATION_BY_CONTAINER_NAME = _installations_where(
    installations_t.c.server_id == bindparam("server_id"),
    installations_t.c.container_name == bindparam("container_name"),
)

_env_encoder = msgspec.json.Encoder(order="sorted")
_env_decoder = msgspec.json.Decoder(dict[str, str])

AnyRow = Row[*tuple[Any, ...]]


# --- rows to core ----------------------------------------------------------------------------


def _user_to_core(row: AnyRow) -> User:
    return User(
        id=row.id, email=row.email, password_hash=row.password_hash, created_at=row.created_at
    )


def _token_to_core(row: AnyRow) -> ApiToken:
    return ApiToken(
        user_id=row.user_id,
        token_hash=row.token_hash,
        prefix=row.prefix,
        created_at=row.created_at,
        last_used_at=row.last_used_at,
    )


def _server_to_core(row: AnyRow) -> Server:
    return Server(
        id=row.id,
        owner_id=row.owner_id,
        name=row.name,
        transport=Transport(row.transport),
        address=row.address,
        ssh_port=row.ssh_port,
        ssh_user=row.ssh_user,
        status=ServerStatus(row.status),
        created_at=row.created_at,
        last_seen_at=row.last_seen_at,
        facts=msgspec.convert(row.facts or {}, ServerFacts),
        enrollment_expires_at=row.enrollment_expires_at,
        status_detail=row.status_detail,
        host_keys=tuple(row.host_keys or ()),
        public_key=row.public_key,
    )


def _snapshot_to_core(row: AnyRow) -> ContainerSnapshot:
    return ContainerSnapshot(
        server_id=row.server_id,
        observed_at=row.observed_at,
        containers=msgspec.convert(row.containers, tuple[Container, ...]),
    )


def _spec_to_core(row: AnyRow) -> DeploymentSpec:
    return DeploymentSpec(
        image=row.image,
        port=row.port,
        domain=row.domain,
        env_keys=tuple(row.env_keys),
        volumes=tuple(row.volumes),
    )


def _installation_status(row: AnyRow) -> InstallationStatus:
    """The core's rule over what the listing query aggregated."""
    last = row.last_final_state
    return InstallationStatus.derive(
        any_active=bool(row.any_active), last_final=DeploymentState(last) if last else None
    )


def _installation_to_core(row: AnyRow, server_id: UUID | None = None) -> Installation:
    """From a row of ``_installations_where``; ``server_id`` if the row has none."""
    last = (
        DeploymentRef(
            id=row.last_id,
            state=_DEPLOYMENT_STATES[row.last_state],
            finished_at=row.last_finished_at,
        )
        if row.last_id is not None
        else None
    )
    return Installation(
        id=row.id,
        server_id=row.server_id if server_id is None else server_id,
        name=row.name,
        container_name=row.container_name,
        spec=_spec_to_core(row),
        host_port=row.host_port,
        status=_installation_status(row),
        created_at=row.created_at,
        updated_at=row.updated_at,
        last_deployment=last,
    )


def _event_to_core(row: AnyRow) -> DeploymentEvent:
    return DeploymentEvent(at=row.at, step=row.step, message=row.message)


def _deployment_to_core(row: AnyRow, events: Sequence[DeploymentEvent]) -> Deployment:
    return Deployment(
        id=row.id,
        installation_id=row.installation_id,
        server_id=row.server_id,
        spec=_spec_to_core(row),
        state=DeploymentState(row.state),
        step=row.step,
        error=row.error,
        created_at=row.created_at,
        started_at=row.started_at,
        finished_at=row.finished_at,
        events=tuple(events),
    )


# --- helpers ---------------------------------------------------------------------------------


def _row_if(
    table: Table, values: Mapping[str, Any], *condition: ColumnElement[bool]
) -> Select[Any]:
    """``SELECT <values> WHERE <condition>``: a row for ``table``, or none unless it holds.

    Inserting from it is how a child row is only ever attached to a parent of
    the same owner, in one statement.
    """
    return select(*(literal(v, table.c[n].type).label(n) for n, v in values.items())).where(
        *condition
    )


def _insert_if(table: Table, values: Mapping[str, Any], *condition: ColumnElement[bool]) -> Insert:
    """``INSERT INTO table SELECT <values> WHERE <condition>``."""
    return insert(table).from_select(list(values), _row_if(table, values, *condition))


def _raise_conflict(exc: IntegrityError, table: Table, messages: Mapping[str, str]) -> NoReturn:
    """Re-raise a unique violation as ``WriteConflict`` with the message for its constraint.

    Any other integrity error (a broken foreign key, …) is a bug and propagates as is.
    """
    name = dialect.violated_unique(exc, [table])
    if name is not None and name in messages:
        raise WriteConflict(messages[name]) from exc
    raise exc


def _seal_env(box: SecretBox, env: Mapping[str, str]) -> bytes:
    return box.seal(_env_encoder.encode(dict(env)))


class _Repository:
    def __init__(self, tx: Transaction) -> None:
        self._tx = tx


# --- users and tokens ------------------------------------------------------------------------


class SqlUserRepository(_Repository):
    """``UserRepository``: emails are stored and compared lowercased."""

    async def add(self, user: User) -> None:
        """Store a new user. Raises ``Conflict`` if the email is taken."""
        values = msgspec.structs.asdict(user) | {"email": user.email.lower()}
        try:
            await self._tx.write(insert(users_t).values(values))
        except IntegrityError as exc:
            _raise_conflict(
                exc, users_t, {"uq_user_account_email": "This email address is already taken."}
            )

    async def get(self, user_id: UUID) -> User | None:
        """The user, or ``None``."""
        row = (await self._tx.read(select(users_t).where(users_t.c.id == user_id))).first()
        return _user_to_core(row) if row else None

    async def get_by_email(self, email: str) -> User | None:
        """The user with this email, compared case-insensitively, or ``None``."""
        stmt = select(users_t).where(users_t.c.email == email.strip().lower())
        row = (await self._tx.read(stmt)).first()
        return _user_to_core(row) if row else None

    async def first(self) -> User | None:
        """The oldest user, or ``None`` when there is none yet."""
        stmt = select(users_t).order_by(users_t.c.created_at, users_t.c.id).limit(1)
        row = (await self._tx.read(stmt)).first()
        return _user_to_core(row) if row else None


class SqlTokenRepository(_Repository):
    """``TokenRepository``: at most one token per user, found by its hash."""

    async def replace(self, token: ApiToken) -> None:
        """Make ``token`` the user's only token; the previous one is gone in this transaction."""
        await self._tx.write(delete(tokens_t).where(tokens_t.c.user_id == token.user_id))
        try:
            await self._tx.write(insert(tokens_t).values(msgspec.structs.asdict(token)))
        except IntegrityError as exc:
            _raise_conflict(
                exc, tokens_t, {"ix_api_token_token_hash": "This token is already in use."}
            )

    async def get(self, user_id: UUID) -> ApiToken | None:
        """The user's token, or ``None``."""
        stmt = select(tokens_t).where(tokens_t.c.user_id == user_id)
        row = (await self._tx.read(stmt)).first()
        return _token_to_core(row) if row else None

    async def find(self, token_hash: str) -> tuple[User, ApiToken] | None:
        """The token with this hash and its user, in one query; ``None`` if unknown.

        Cached (every request authenticates) until the next commit anywhere: a
        replaced token is unknown at once, whichever process replaced it.
        """
        return await self._tx.cached(("token", token_hash), partial(self._find, token_hash))

    async def _find(self, token_hash: str) -> tuple[User, ApiToken] | None:
        found = await self._tx.read(_TOKEN_WITH_USER, {"token_hash": token_hash})
        row = found.first()
        if row is None:
            return None
        token = ApiToken(
            user_id=row.user_id,
            token_hash=row.token_hash,
            prefix=row.prefix,
            created_at=row.token_created_at,
            last_used_at=row.last_used_at,
        )
        return _user_to_core(row), token

    async def touch(self, user_id: UUID, at: datetime) -> None:
        """Record that the user's token was used at ``at``."""
        await self._tx.write(
            update(tokens_t).where(tokens_t.c.user_id == user_id).values(last_used_at=at)
        )


# --- servers ---------------------------------------------------------------------------------


class SqlServerRepository(_Repository):
    """``ServerRepository``: servers and their last container snapshot, per owner."""

    def __init__(self, tx: Transaction, box: SecretBox) -> None:
        super().__init__(tx)
        self._box = box

    async def add(
        self,
        server: Server,
        enrollment_token_hash: str | None,
        private_key: bytes | None = None,
    ) -> None:
        """Store a new server of ``server.owner_id``.

        Keeps the hash of its one-time enrollment token, and its SSH private key
        sealed (it is never read back through this repository).
        """
        values = {
            "id": server.id,
            "owner_id": server.owner_id,
            "name": server.name,
            "transport": server.transport.value,
            "address": server.address,
            "ssh_port": server.ssh_port,
            "ssh_user": server.ssh_user,
            "status": server.status.value,
            "status_detail": server.status_detail,
            "created_at": server.created_at,
            "last_seen_at": server.last_seen_at,
            "facts": msgspec.to_builtins(server.facts),
            "enrollment_token_hash": enrollment_token_hash,
            "enrollment_expires_at": server.enrollment_expires_at,
            "private_key_sealed": self._box.seal(private_key) if private_key else None,
            "public_key": server.public_key,
            "host_keys": list(server.host_keys),
        }
        try:
            await self._tx.write(insert(servers_t).values(values))
        except IntegrityError as exc:
            _raise_conflict(
                exc,
                servers_t,
                {"uq_server_enrollment_token_hash": "This enrollment token is already in use."},
            )

    async def get(self, owner_id: UUID, server_id: UUID) -> Server | None:
        """The owner's server, or ``None`` (also when it belongs to someone else).

        Cached per (owner, server) until the next commit anywhere.
        """
        return await self._tx.cached(
            ("server", owner_id, server_id), partial(self._get, owner_id, server_id)
        )

    async def _get(self, owner_id: UUID, server_id: UUID) -> Server | None:
        found = await self._tx.read(_SERVER_BY_ID, {"server_id": server_id, "owner_id": owner_id})
        row = found.first()
        return _server_to_core(row) if row else None

    async def lock(self, owner_id: UUID, server_id: UUID) -> Server | None:
        """The owner's server, or ``None``, read fresh and locked until the transaction ends.

        Deploys lock their server before they read its installations and deployments, so
        concurrent deploys to one server take turns (``dialect.read_locked``). Never cached.
        """
        found = await self._tx.read_locked(
            _SERVER_BY_ID, {"server_id": server_id, "owner_id": owner_id}
        )
        row = found.first()
        return _server_to_core(row) if row else None

    async def list(self, owner_id: UUID) -> builtins.list[Server]:
        """The owner's servers, oldest first."""
        stmt = (
            select(*_SERVER_COLUMNS)
            .where(servers_t.c.owner_id == owner_id)
            .order_by(servers_t.c.created_at, servers_t.c.id)
        )
        return [_server_to_core(row) for row in await self._tx.read(stmt)]

    async def snapshot(self, owner_id: UUID, server_id: UUID) -> ContainerSnapshot | None:
        """The last container list seen on the owner's server, or ``None``."""
        stmt = select(snapshots_t).where(
            snapshots_t.c.server_id == server_id, snapshots_t.c.owner_id == owner_id
        )
        row = (await self._tx.read(stmt)).first()
        return _snapshot_to_core(row) if row else None

    async def save_snapshot(self, owner_id: UUID, snapshot: ContainerSnapshot) -> None:
        """Replace the server's snapshot. Writes nothing unless the server is the owner's."""
        values = {
            "server_id": snapshot.server_id,
            "owner_id": owner_id,
            "observed_at": snapshot.observed_at,
            "containers": msgspec.to_builtins(snapshot.containers),
        }
        owned_server = (
            select(servers_t.c.id)
            .where(servers_t.c.id == snapshot.server_id, servers_t.c.owner_id == owner_id)
            .exists()
        )
        stmt = dialect.upsert_from_select(
            self._tx.dialect,
            snapshots_t,
            list(values),
            _row_if(snapshots_t, values, owned_server),
            key=["server_id"],
        )
        await self._tx.write(stmt)

    async def delete(self, owner_id: UUID, server_id: UUID) -> bool:
        """Remove the owner's server with its installations, deployments (and their events)
        and snapshot. ``False`` if the owner has no such server.

        Raises ``WriteConflict`` if one of its deployments is running."""
        d = deployments_t.c
        of_server = (d.server_id == server_id, d.owner_id == owner_id)
        # Locked, so no worker claims one of them before they are gone; and checked
        # under that lock, as the caller's check may predate a claim.
        states = await self._tx.read_locked(select(d.state).where(*of_server), {})
        if any(state == DeploymentState.RUNNING.value for (state,) in states):
            raise WriteConflict("A deployment on this server is running; wait for it to finish.")
        await self._tx.write(
            delete(events_t).where(events_t.c.deployment_id.in_(select(d.id).where(*of_server)))
        )
        await self._tx.write(delete(deployments_t).where(*of_server))
        i = installations_t.c
        await self._tx.write(
            delete(installations_t).where(i.server_id == server_id, i.owner_id == owner_id)
        )
        snap = snapshots_t.c
        await self._tx.write(
            delete(snapshots_t).where(snap.server_id == server_id, snap.owner_id == owner_id)
        )
        deleted = await self._tx.write(
            delete(servers_t).where(servers_t.c.id == server_id, servers_t.c.owner_id == owner_id)
        )
        return bool(deleted.rowcount)

    async def by_enrollment(self, token_hash: str) -> Server | None:
        """The server whose enrollment token has this hash (unique), whoever owns it.

        Never cached: it is read once per enrollment or status poll.
        """
        stmt = select(*_SERVER_COLUMNS).where(servers_t.c.enrollment_token_hash == token_hash)
        row = (await self._tx.read(stmt)).first()
        return _server_to_core(row) if row else None

    async def enroll(
        self,
        server_id: UUID,
        *,
        host_keys: tuple[str, ...],
        facts: ServerFacts,
        address: str | None,
        ssh_port: int,
    ) -> bool:
        """Pin the host keys and move the server from ``pending`` to ``offline``, in one
        conditional UPDATE: ``False`` (nothing written) if it is no longer pending."""
        s = servers_t.c
        updated = await self._tx.write(
            update(servers_t)
            .where(s.id == server_id, s.status == ServerStatus.PENDING.value)
            .values(
                status=ServerStatus.OFFLINE.value,
                status_detail=None,
                host_keys=list(host_keys),
                facts=msgspec.to_builtins(facts),
                address=address,
                ssh_port=ssh_port,
            )
        )
        return bool(updated.rowcount)


# --- installations ---------------------------------------------------------------------------


class SqlInstallationRepository(_Repository):
    """``InstallationRepository``: installations with their status derived from deployments."""

    def __init__(self, tx: Transaction, box: SecretBox) -> None:
        super().__init__(tx)
        self._box = box

    async def get(self, owner_id: UUID, installation_id: UUID) -> Installation | None:
        """The owner's installation with its last deployment, or ``None``."""
        return await self._one(
            _INSTALLATION_BY_ID, {"owner_id": owner_id, "installation_id": installation_id}
        )

    async def get_by_container_name(
        self, owner_id: UUID, server_id: UUID, container_name: str
    ) -> Installation | None:
        """The installation with this container name on the owner's server, or ``None``."""
        return await self._one(
            _INSTALLATION_BY_CONTAINER_NAME,
            {"owner_id": owner_id, "server_id": server_id, "container_name": container_name},
        )

    async def list(self, owner_id: UUID, server_id: UUID) -> builtins.list[Installation]:
        """The server's installations, oldest first, each with its last deployment.

        One query, whatever the number of installations and deployments; cached
        per (owner, server) until the next commit anywhere.
        """
        found = await self._tx.cached(
            ("installations", owner_id, server_id),
            partial(self._list, owner_id, server_id),
            weight=lambda installations: 1 + len(installations),
        )
        return builtins.list(found)

    async def _list(self, owner_id: UUID, server_id: UUID) -> tuple[Installation, ...]:
        params = {"owner_id": owner_id, "server_id": server_id}
        result = await self._tx.read(_INSTALLATIONS_OF_SERVER, params)
        return tuple(_installation_to_core(row, server_id) for row in result)

    async def delete(self, owner_id: UUID, installation_id: UUID) -> bool:
        """Remove the owner's installation with its deployments and their events.

        ``False`` if there was no such installation of the owner.
        """
        d = deployments_t.c
        of_installation = (d.installation_id == installation_id, d.owner_id == owner_id)
        await self._tx.write(
            delete(events_t).where(
                events_t.c.deployment_id.in_(select(d.id).where(*of_installation))
            )
        )
        await self._tx.write(delete(deployments_t).where(*of_installation))
        deleted = await self._tx.write(
            delete(installations_t).where(
                installations_t.c.id == installation_id, installations_t.c.owner_id == owner_id
            )
        )
        return bool(deleted.rowcount)

    async def save(self, owner_id: UUID, installation: Installation, env: dict[str, str]) -> None:
        """Insert or update the owner's installation; env values are sealed.

        Raises ``WriteConflict`` if another installation on the server holds the same
        container name, domain or host port, and ``NotFound`` if the server is not
        the owner's. The installation's status and last deployment are derived,
        never stored.
        """
        spec = installation.spec
        values: dict[str, Any] = {
            "name": installation.name,
            "container_name": installation.container_name,
            "image": spec.image,
            "port": spec.port,
            "domain": spec.domain,
            "host_port": installation.host_port,
            "env_keys": list(spec.env_keys),
            "env_sealed": _seal_env(self._box, env),
            "volumes": list(spec.volumes),
            "updated_at": installation.updated_at,
        }
        try:
            updated = await self._tx.write(
                update(installations_t)
                .where(
                    installations_t.c.id == installation.id,
                    installations_t.c.owner_id == owner_id,
                    installations_t.c.server_id == installation.server_id,
                )
                .values(values)
            )
            if updated.rowcount:
                return
            values |= {
                "id": installation.id,
                "owner_id": owner_id,
                "server_id": installation.server_id,
                "created_at": installation.created_at,
            }
            inserted = await self._tx.write(
                _insert_if(
                    installations_t,
                    values,
                    select(servers_t.c.id)
                    .where(
                        servers_t.c.id == installation.server_id,
                        servers_t.c.owner_id == owner_id,
                    )
                    .exists(),
                )
            )
        except IntegrityError as exc:
            _raise_conflict(
                exc,
                installations_t,
                {
                    "uq_installation_server_id_domain": (
                        f"Domain {spec.domain} is already used by another installation "
                        "on this server."
                    ),
                    "uq_installation_server_id_host_port": (
                        f"Host port {installation.host_port} is already used by another "
                        "installation on this server."
                    ),
                    "uq_installation_server_id_container_name": (
                        f"An installation named {installation.container_name!r} already "
                        "exists on this server."
                    ),
                    "pk_installation": "This installation id is already taken.",
                },
            )
        if not inserted.rowcount:
            raise NotFound("Server not found.")

    async def _one(self, stmt: Select[Any], params: Mapping[str, object]) -> Installation | None:
        row = (await self._tx.read(stmt, params)).first()
        return _installation_to_core(row) if row else None


# --- deployments -----------------------------------------------------------------------------


class SqlDeploymentRepository(_Repository):
    """``DeploymentRepository``: durable deployments, their sealed env and their event log."""

    def __init__(self, tx: Transaction, box: SecretBox) -> None:
        super().__init__(tx)
        self._box = box

    async def add(
        self,
        owner_id: UUID,
        deployment: Deployment,
        env: dict[str, str],
        idempotency_key: str | None = None,
        fingerprint: str | None = None,
    ) -> None:
        """Store a new deployment of the owner's installation, its sealed env and its events.

        Raises ``WriteConflict`` if the owner already used ``idempotency_key``, and
        ``NotFound`` if the installation (on ``deployment.server_id``) is not the owner's.
        """
        spec = deployment.spec
        values: dict[str, Any] = {
            "id": deployment.id,
            "owner_id": owner_id,
            "installation_id": deployment.installation_id,
            "server_id": deployment.server_id,
            "image": spec.image,
            "port": spec.port,
            "domain": spec.domain,
            "env_keys": list(spec.env_keys),
            "volumes": list(spec.volumes),
            "env_sealed": _seal_env(self._box, env),
            "state": deployment.state.value,
            "step": deployment.step,
            "error": deployment.error,
            "created_at": deployment.created_at,
            "started_at": deployment.started_at,
            "finished_at": deployment.finished_at,
            "idempotency_key": idempotency_key,
            "fingerprint": fingerprint,
            "attempts": 0,
        }
        owned_installation = (
            select(installations_t.c.id)
            .where(
                installations_t.c.id == deployment.installation_id,
                installations_t.c.owner_id == owner_id,
                installations_t.c.server_id == deployment.server_id,
            )
            .exists()
        )
        try:
            inserted = await self._tx.write(_insert_if(deployments_t, values, owned_installation))
        except IntegrityError as exc:
            _raise_conflict(
                exc,
                deployments_t,
                {
                    "uq_deployment_owner_id_idempotency_key": (
                        "This Idempotency-Key was already used for another deployment."
                    ),
                    "pk_deployment": "This deployment id is already taken.",
                },
            )
        if not inserted.rowcount:
            raise NotFound("Installation not found.")
        await self._add_events(deployment.id, deployment.events)

    async def get(self, owner_id: UUID, deployment_id: UUID) -> Deployment | None:
        """The owner's deployment with its events, oldest first, or ``None``."""
        found = await self._load(owner_id, deployments_t.c.id == deployment_id)
        return found[0][0] if found else None

    async def by_idempotency_key(self, owner_id: UUID, key: str) -> tuple[Deployment, str] | None:
        """The deployment the owner created with this key, and its request fingerprint."""
        found = await self._load(owner_id, deployments_t.c.idempotency_key == key)
        return found[0] if found else None

    async def active(self, owner_id: UUID, installation_id: UUID) -> builtins.list[Deployment]:
        """The installation's queued or running deployments, oldest first, with their events."""
        found = await self._load(
            owner_id,
            deployments_t.c.installation_id == installation_id,
            deployments_t.c.state.in_(_ACTIVE_STATES),
        )
        return [deployment for deployment, _ in found]

    async def recent(
        self, owner_id: UUID, server_id: UUID, limit: int
    ) -> builtins.list[Deployment]:
        """The server's ``limit`` newest deployments, newest first, with their events."""
        d = deployments_t.c
        newest = (
            select(d.id)
            .where(d.server_id == server_id, d.owner_id == owner_id)
            .order_by(d.created_at.desc(), d.id.desc())
            .limit(limit)
        )
        found = await self._load(owner_id, d.id.in_(newest.scalar_subquery()))
        return [deployment for deployment, _ in reversed(found)]

    async def finish(
        self,
        owner_id: UUID,
        deployment_id: UUID,
        state: DeploymentState,
        at: datetime,
        error: str | None,
        event: DeploymentEvent,
        *,
        queued_only: bool = False,
    ) -> None:
        """Move a deployment to the final ``state`` from a state the core's table allows
        (``lifecycle.sources``), with a closing event.

        The worker's lease is released. Raises ``NotFound`` if the deployment is not
        the owner's, and ``WriteConflict`` if it has already finished (final states are
        final) or, with ``queued_only``, is no longer queued or no longer there (one
        conditional UPDATE: a worker's claim that commits first wins, even on PostgreSQL
        at READ COMMITTED).
        """
        if not state.is_final:
            raise ValueError(f"{state} is not a final state.")
        d = deployments_t.c
        allowed = sources(state) & ({DeploymentState.QUEUED} if queued_only else ACTIVE)
        from_states = sorted(s.value for s in allowed)
        result = await self._tx.write(
            update(deployments_t)
            .where(d.id == deployment_id, d.owner_id == owner_id, d.state.in_(from_states))
            .values(
                state=state.value,
                finished_at=at,
                error=error,
                lease_owner=None,
                lease_expires_at=None,
            )
        )
        if not result.rowcount:
            exists = await self._tx.read(
                select(d.state).where(d.id == deployment_id, d.owner_id == owner_id)
            )
            found = exists.first()
            if found is None and queued_only:  # removed meanwhile: decide again on fresh reads
                raise WriteConflict("This deployment is gone.")
            if found is None:
                raise NotFound("Deployment not found.")
            if found.state == DeploymentState.RUNNING.value:
                raise WriteConflict("This deployment is running.")
            raise WriteConflict("This deployment has already finished.")
        await self._add_events(deployment_id, [event])

    async def env(self, owner_id: UUID, deployment_id: UUID) -> dict[str, str]:
        """The env values the deployment runs with, unsealed. For the worker only.

        Raises ``NotFound`` if the deployment is not the owner's.
        """
        d = deployments_t.c
        stmt = select(d.env_sealed).where(d.id == deployment_id, d.owner_id == owner_id)
        sealed = (await self._tx.read(stmt)).scalar_one_or_none()
        if sealed is None:
            raise NotFound("Deployment not found.")
        return _env_decoder.decode(self._box.open(sealed))

    async def _load(
        self, owner_id: UUID, *where: ColumnElement[bool]
    ) -> builtins.list[tuple[Deployment, str]]:
        """The owner's deployments matching ``where``, with their events and fingerprints."""
        d = deployments_t.c
        stmt = (
            select(*_DEPLOYMENT_COLUMNS)
            .where(d.owner_id == owner_id, *where)
            .order_by(d.created_at, d.id)
        )
        rows = (await self._tx.read(stmt)).all()
        if not rows:
            return []
        events = await self._events([row.id for row in rows])
        return [
            (_deployment_to_core(row, events.get(row.id, ())), row.fingerprint or "")
            for row in rows
        ]

    async def _events(self, ids: Sequence[UUID]) -> dict[UUID, builtins.list[DeploymentEvent]]:
        e = events_t.c
        stmt = (
            select(e.deployment_id, e.at, e.step, e.message)
            .where(e.deployment_id.in_(ids))
            .order_by(e.at, e.id)
        )
        found: dict[UUID, builtins.list[DeploymentEvent]] = {}
        for row in await self._tx.read(stmt):
            found.setdefault(row.deployment_id, []).append(_event_to_core(row))
        return found

    async def _add_events(self, deployment_id: UUID, events: Iterable[DeploymentEvent]) -> None:
        rows = [
            {"deployment_id": deployment_id, "at": ev.at, "step": ev.step, "message": ev.message}
            for ev in events
        ]
        if rows:
            await self._tx.write(insert(events_t), rows)
