"""What every SQL repository (and the job queue and the fleet) shares: the rows' columns
and queries, rows turned into core types, sealed env, conflict translation."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, NoReturn, TypeVar, cast
from uuid import UUID

import msgspec
from berth.core.access import Owner, servers_of, team_of
from berth.core.errors import WriteConflict
from berth.core.lifecycle import ACTIVE
from berth.core.models import (
    ApiToken,
    ContainerSnapshot,
    Deployment,
    DeploymentEvent,
    DeploymentSpec,
    DeploymentState,
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
    insert,
    literal,
    select,
)
from sqlalchemy.exc import IntegrityError
from sqlalchemy.sql import Executable
from sqlalchemy.sql.dml import Insert

from . import dialect
from .tables import (
    ApiTokenRow,
    ContainerSnapshotRow,
    DeploymentEventRow,
    DeploymentRow,
    InstallationRow,
    InstallationWatchRow,
    ServerRow,
    StoreMarkRow,
    UserRow,
    WorkerRow,
)
from .transaction import Transaction

SelectT = TypeVar("SelectT", bound=Select[Any])

users_t = cast(Table, UserRow.__table__)
tokens_t = cast(Table, ApiTokenRow.__table__)
servers_t = cast(Table, ServerRow.__table__)
installations_t = cast(Table, InstallationRow.__table__)
deployments_t = cast(Table, DeploymentRow.__table__)
events_t = cast(Table, DeploymentEventRow.__table__)
snapshots_t = cast(Table, ContainerSnapshotRow.__table__)
watches_t = cast(Table, InstallationWatchRow.__table__)
workers_t = cast(Table, WorkerRow.__table__)
marks_t = cast(Table, StoreMarkRow.__table__)

_ACTIVE_STATES = tuple(sorted(state.value for state in ACTIVE))

# What read queries select: what the core needs, never the sealed secrets.
_SERVER_COLUMNS = [c for c in servers_t.c if c.name not in ("private_key_sealed", "watched_by")]
_DEPLOYMENT_COLUMNS = [c for c in deployments_t.c if c.name not in ("env_sealed", "owner_id")]


# Statements on hot paths (every request authenticates) are built once with named
# parameters: SQLAlchemy then reuses their compiled form.
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
_env_encoder = msgspec.json.Encoder(order="sorted")
_env_decoder = msgspec.json.Decoder(dict[str, str])

AnyRow = Row[*tuple[Any, ...]]


# --- rows to core ----------------------------------------------------------------------------

S = TypeVar("S", bound=msgspec.Struct)


def from_row(
    struct: type[S], row: AnyRow, /, given: Mapping[str, Any] | None = None, **columns: str
) -> S:
    """The core Struct whose fields are the values ``given`` (those read otherwise: an
    enum, a JSON column, a nested Struct), else the row's columns of the same name, or of
    the name ``columns`` gives for a field (``created_at="user_created_at"`` in a join)."""
    given = given or {}
    return struct(
        **{
            name: given[name] if name in given else getattr(row, columns.get(name, name))
            for name in struct.__struct_fields__
        }
    )


def _user_to_core(row: AnyRow) -> User:
    return from_row(User, row)


def _token_to_core(row: AnyRow) -> ApiToken:
    return from_row(ApiToken, row)


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
        offered_host_key=row.offered_host_key,
        checked_at=row.checked_at,
    )


def _snapshot_to_core(row: AnyRow) -> ContainerSnapshot:
    # JSON columns come back as lists and dicts: msgspec makes them core types again.
    return msgspec.convert(
        {"server_id": row.server_id, "observed_at": row.observed_at, "containers": row.containers},
        ContainerSnapshot,
    )


#: Spec fields whose column is named otherwise (the installation has a ``host_port`` of
#: its own: the port it is published on now).
_SPEC_COLUMN_OF = {"host_port": "spec_host_port"}


def _spec_to_core(row: AnyRow) -> DeploymentSpec:
    return msgspec.convert(
        {
            name: getattr(row, _SPEC_COLUMN_OF.get(name, name))
            for name in DeploymentSpec.__struct_fields__
        },
        DeploymentSpec,
    )


def _spec_values(spec: DeploymentSpec) -> dict[str, Any]:
    """A spec as the columns the installation and deployment tables both hold."""
    values: dict[str, Any] = msgspec.to_builtins(spec)
    return {_SPEC_COLUMN_OF.get(name, name): value for name, value in values.items()}


def _event_to_core(row: AnyRow) -> DeploymentEvent:
    return DeploymentEvent(at=row.at, step=row.step, message=row.message)


def _deployment_to_core(row: AnyRow, events: Sequence[DeploymentEvent]) -> Deployment:
    given = {
        "spec": _spec_to_core(row),
        "state": DeploymentState(row.state),
        "events": tuple(events),
    }
    return from_row(Deployment, row, given)


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


def _scoped(table: Table, owner: Owner) -> tuple[ColumnElement[bool], ...]:
    """The condition that picks the rows of ``table`` in ``owner``'s scope: its team's,
    and of a scope limited to servers only those on them (a table without a server
    column is a team's alone: registries, webhooks)."""
    where = [table.c.owner_id == team_of(owner)]
    servers = servers_of(owner)
    if servers is not None:
        column = table.c.id if table is servers_t else table.c.get("server_id")
        if column is not None:
            where.append(column.in_(sorted(servers)))
    return tuple(where)


def _limited(stmt: SelectT, column: ColumnElement[Any], owner: Owner) -> SelectT:
    """``stmt`` (built once, for a whole team) narrowed to ``owner``'s servers, if its
    scope is limited to some: ``column`` must be one of them."""
    servers = servers_of(owner)
    return stmt if servers is None else stmt.where(column.in_(sorted(servers)))


def _owned(table: Table, owner_id: Owner, row_id: UUID) -> tuple[ColumnElement[bool], ...]:
    """The condition that picks the owner's row ``row_id`` of ``table`` (and no one else's)."""
    return (table.c.id == row_id, *_scoped(table, owner_id))


def _ending(state: DeploymentState, at: datetime, error: str | None) -> dict[str, Any]:
    """The columns a deployment's end sets: its final state and time, the error, and no
    lease any more."""
    return {
        "state": state.value,
        "finished_at": at,
        "error": error,
        "lease_owner": None,
        "lease_expires_at": None,
    }


def _seal_env(box: SecretBox, env: Mapping[str, str]) -> bytes:
    return box.seal(_env_encoder.encode(dict(env)))


class _Repository:
    """A repository of a unit of work: its transaction, and the box that seals env values
    and keys (for the repositories that store them)."""

    def __init__(self, tx: Transaction, box: SecretBox | None = None) -> None:
        self._tx = tx
        self._box_or_none = box

    @property
    def _box(self) -> SecretBox:
        if self._box_or_none is None:
            raise TypeError(f"{type(self).__name__} was built without a SecretBox")
        return self._box_or_none

    async def _insert(
        self, table: Table, values: Mapping[str, Any], conflicts: Mapping[str, str]
    ) -> None:
        """Insert one row; a unique violation named in ``conflicts`` raises ``WriteConflict``
        with its message."""
        try:
            await self._tx.write(insert(table).values(values))
        except IntegrityError as exc:
            _raise_conflict(exc, table, conflicts)

    async def _changed(self, stmt: Executable) -> bool:
        """Run an UPDATE or DELETE: whether it changed a row."""
        return bool((await self._tx.write(stmt)).rowcount)
