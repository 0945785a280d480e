"""The schema, as SQLAlchemy 2.0 declarative tables.

Rows are storage, not the domain: ``repositories`` turns them into core Structs.
Every table that holds a tenant's data carries ``owner_id``, its team's id
(denormalized), so each query can filter on the team directly. Constraint names are fixed by the
naming convention; ``repositories`` maps violations of them to ``WriteConflict``.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    DateTime,
    Dialect,
    Double,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    Uuid,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, MappedColumn, declared_attr, mapped_column
from sqlalchemy.types import TypeDecorator

__all__ = [
    "SPEC_COLUMNS",
    "AccessTokenRow",
    "ApiTokenRow",
    "AuditEntryRow",
    "Base",
    "ContainerSnapshotRow",
    "DeploymentEventRow",
    "DeploymentRow",
    "InstallationRow",
    "InstallationWatchRow",
    "InviteRow",
    "OAuthAuthorizationRow",
    "OAuthClientRow",
    "OAuthGrantRow",
    "RateLimitRow",
    "RegistryRow",
    "ServerRow",
    "StoreMarkRow",
    "TeamInvitationRow",
    "TeamMemberRow",
    "TeamRow",
    "UserRow",
    "UtcDateTime",
    "WebSessionRow",
    "WebhookDeliveryRow",
    "WebhookRow",
    "WorkerRow",
    "metadata",
]

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_N_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class UtcDateTime(TypeDecorator[datetime]):
    """A timestamp that goes in and comes out timezone-aware UTC, on every dialect.

    SQLite keeps no zone, so values are stored as UTC and read back as UTC;
    naive datetimes are refused rather than guessed at.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError(f"Refusing to store a naive datetime: {value!r}")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


def _references(table: str, **column: Any) -> MappedColumn[Any]:
    """A column holding the id of a ``table`` row; deleting that row deletes this one."""
    return mapped_column(ForeignKey(f"{table}.id", ondelete="CASCADE"), **column)


# BIGINT autoincrement where the dialect has it; SQLite only autoincrements INTEGER.
_BigIntId = BigInteger().with_variant(Integer(), "sqlite")


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {
        datetime: UtcDateTime(),
        uuid.UUID: Uuid(),
        dict[str, Any]: JSON(),
        list[Any]: JSON(),
        bytes: LargeBinary(),
    }


metadata = Base.metadata


class UserRow(Base):
    __tablename__ = "user_account"

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True)
    email: Mapped[str] = mapped_column(String(254), unique=True)  # stored lowercased
    password_hash: Mapped[str] = mapped_column(String(255))
    created_at: Mapped[datetime]


class ApiTokenRow(Base):
    """At most one token per user: the primary key is the user."""

    __tablename__ = "api_token"

    user_id: Mapped[uuid.UUID] = _references("user_account", primary_key=True)
    token_hash: Mapped[str] = mapped_column(String(128), unique=True, index=True)
    prefix: Mapped[str] = mapped_column(String(32))
    created_at: Mapped[datetime]
    last_used_at: Mapped[datetime | None]


class TeamRow(Base):
    """A team: what servers, registries and webhooks belong to. A user's personal team
    has the user's id and names them in ``personal_of``."""

    __tablename__ = "team"

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(254))
    personal_of: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("user_account.id", ondelete="CASCADE"), unique=True
    )
    created_at: Mapped[datetime]


class TeamMemberRow(Base):
    """A user's membership of a team, with their role."""

    __tablename__ = "team_member"

    team_id: Mapped[uuid.UUID] = _references("team", primary_key=True)
    user_id: Mapped[uuid.UUID] = _references("user_account", primary_key=True, index=True)
    role: Mapped[str] = mapped_column(String(16))
    joined_at: Mapped[datetime]


class TeamInvitationRow(Base):
    """A one-time invitation to join a team, keyed by id, found by its token's hash."""

    __tablename__ = "team_invitation"

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True)
    team_id: Mapped[uuid.UUID] = _references("team", index=True)
    email: Mapped[str] = mapped_column(String(254))
    role: Mapped[str] = mapped_column(String(16))
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime]
    expires_at: Mapped[datetime]
    invited_by: Mapped[uuid.UUID] = _references("user_account")
    accepted_at: Mapped[datetime | None]


class AccessTokenRow(Base):
    """A named token of a user for one team; only its hash is kept."""

    __tablename__ = "access_token"
    __table_args__ = (Index("ix_access_token_team_id_user_id", "team_id", "user_id"),)

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True)
    user_id: Mapped[uuid.UUID] = _references("user_account", index=True)
    team_id: Mapped[uuid.UUID] = _references("team")
    name: Mapped[str] = mapped_column(String(100))
    scopes: Mapped[list[Any]]
    server_ids: Mapped[list[Any] | None]
    token_hash: Mapped[str] = mapped_column(String(128), unique=True)
    prefix: Mapped[str] = mapped_column(String(32))
    created_at: Mapped[datetime]
    expires_at: Mapped[datetime | None]
    last_used_at: Mapped[datetime | None]


class AuditEntryRow(Base):
    """One line of a team's audit log. Append-only: nothing updates a row, and only the
    pruning of entries older than ``BERTH_AUDIT_DAYS`` deletes any. The actor is copied
    (not referenced): the line outlives a token, a membership or a user."""

    __tablename__ = "audit_entry"
    __table_args__ = (
        Index("ix_audit_entry_team_id_at_id", "team_id", "at", "id"),
        Index("ix_audit_entry_at", "at"),
    )

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True)
    team_id: Mapped[uuid.UUID] = _references("team")
    at: Mapped[datetime]
    actor_user_id: Mapped[uuid.UUID]
    actor_email: Mapped[str] = mapped_column(String(254))
    token_id: Mapped[uuid.UUID | None]
    token_name: Mapped[str | None] = mapped_column(String(100))
    action: Mapped[str] = mapped_column(String(64))
    target_type: Mapped[str] = mapped_column(String(32))
    target_id: Mapped[str | None] = mapped_column(String(64))
    target_name: Mapped[str | None] = mapped_column(String(300))
    client_address: Mapped[str | None] = mapped_column(String(64))
    outcome: Mapped[str] = mapped_column(String(8))
    detail: Mapped[str | None] = mapped_column(String(300))


class ServerRow(Base):
    __tablename__ = "server"

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True)
    owner_id: Mapped[uuid.UUID] = _references("team", index=True)
    name: Mapped[str] = mapped_column(String(100))
    transport: Mapped[str] = mapped_column(String(16))
    address: Mapped[str | None] = mapped_column(String(253))
    ssh_port: Mapped[int]
    ssh_user: Mapped[str] = mapped_column(String(64))
    status: Mapped[str] = mapped_column(String(32))
    status_detail: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime]
    last_seen_at: Mapped[datetime | None]
    facts: Mapped[dict[str, Any]]
    enrollment_token_hash: Mapped[str | None] = mapped_column(String(128), unique=True)
    enrollment_expires_at: Mapped[datetime | None]
    # SSH: berth's key pair for this server (the private half sealed) and the pinned host keys.
    private_key_sealed: Mapped[bytes | None]
    public_key: Mapped[str | None] = mapped_column(Text)
    host_keys: Mapped[list[Any] | None]
    # The host key the server offered instead of a pinned one (status host_key_mismatch).
    offered_host_key: Mapped[str | None] = mapped_column(Text)
    # The worker watching it (its lease: that worker's ``worker.expires_at``), and when that
    # worker last stood by its status (checked it, or kept it in its backoff).
    watched_by: Mapped[str | None] = mapped_column(String(64), index=True)
    checked_at: Mapped[datetime | None]


_NOT_REMOVED = text("removed_at IS NULL")


def _unique_while_present(*columns: str) -> Index:
    """Unique among a server's installations that are not removed (a removed one keeps its
    history, and its name, domain and port are free again). NULLs never clash."""
    name = "uq_installation_" + "_".join(columns)
    return Index(
        name, *columns, unique=True, sqlite_where=_NOT_REMOVED, postgresql_where=_NOT_REMOVED
    )


class _Spec:
    """What an app runs (``DeploymentSpec``) with its env values sealed: the desired one on
    the installation, and the revision on each deployment."""

    image: Mapped[str] = mapped_column(String(512))
    port: Mapped[int]
    domain: Mapped[str | None] = mapped_column(String(253))
    env_keys: Mapped[list[Any]]
    env_sealed: Mapped[bytes]
    volumes: Mapped[list[Any]]
    memory: Mapped[int | None] = mapped_column(BigInteger)
    cpus: Mapped[float | None] = mapped_column(Double)
    restart: Mapped[str] = mapped_column(String(16), server_default="unless-stopped")
    health_path: Mapped[str | None] = mapped_column(String(1024))
    command: Mapped[list[Any] | None]
    # ``DeploymentSpec.host_port`` (the installation's own ``host_port`` is the port it is
    # published on now, which a domain app's Docker picks).
    spec_host_port: Mapped[int | None]
    stop_grace_seconds: Mapped[int] = mapped_column(default=10, server_default=text("10"))
    build: Mapped[dict[str, Any] | None]  # a BuildSpec; null: the image is pulled


#: The columns an installation shares with its deployments.
SPEC_COLUMNS = tuple(_Spec.__annotations__)


class InstallationRow(_Spec, Base):
    """An app on a server, with its desired spec; status is derived from its deployments.

    ``current_deployment_id`` is its revision serving now (the last succeeded deployment,
    kept through later failures that put it back); ``removed_at`` marks a removed one."""

    __tablename__ = "installation"
    __table_args__ = (
        _unique_while_present("server_id", "container_name"),
        _unique_while_present("server_id", "domain"),
        _unique_while_present("server_id", "host_port"),
    )

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True)
    owner_id: Mapped[uuid.UUID] = _references("team")
    server_id: Mapped[uuid.UUID] = _references("server")
    name: Mapped[str] = mapped_column(String(100))
    container_name: Mapped[str] = mapped_column(String(100))
    host_port: Mapped[int | None]
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]
    current_deployment_id: Mapped[uuid.UUID | None]
    removed_at: Mapped[datetime | None]
    stopped_at: Mapped[datetime | None]
    stopping_until: Mapped[datetime | None]  # a stop on request runs (until then at most)
    # HTTPS through the proxy, as the last deployment's check found it (domain apps only).
    tls_state: Mapped[str | None] = mapped_column(String(16))
    tls_issuer: Mapped[str | None] = mapped_column(String(16))
    tls_reason: Mapped[str | None] = mapped_column(Text)
    tls_checked_at: Mapped[datetime | None]


class InstallationWatchRow(Base):
    """What an installation's container was last seen doing (``berth.core.watch``), and
    since when it was told down (``down_since``; ``None``: not told down). One row per
    installation, written by the worker watching its server."""

    __tablename__ = "installation_watch"

    installation_id: Mapped[uuid.UUID] = _references("installation", primary_key=True)
    owner_id: Mapped[uuid.UUID] = _references("team")
    state: Mapped[str] = mapped_column(String(16))
    container_id: Mapped[str | None] = mapped_column(String(128))
    exit_code: Mapped[int | None]
    exited_at: Mapped[datetime | None]
    restart_count: Mapped[int] = mapped_column(default=0, server_default=text("0"))
    started_at: Mapped[datetime | None]
    observed_at: Mapped[datetime]
    down_since: Mapped[datetime | None]


class DeploymentRow(_Spec, Base):
    """A durable job: the spec it deploys, where it is, and the worker's lease on it."""

    __tablename__ = "deployment"
    __table_args__ = (
        UniqueConstraint("owner_id", "idempotency_key"),
        Index("ix_deployment_state_created_at", "state", "created_at"),
        # An installation's newest deployments, and whether any is active: index seeks.
        Index("ix_deployment_installation_id_created_at_id", "installation_id", "created_at", "id"),
        Index("ix_deployment_installation_id_state", "installation_id", "state"),
        # A server's newest deployments (the dashboard): an index seek.
        Index("ix_deployment_server_id_created_at", "server_id", "created_at"),
    )

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True)
    owner_id: Mapped[uuid.UUID] = _references("team")
    installation_id: Mapped[uuid.UUID] = _references("installation")
    server_id: Mapped[uuid.UUID] = _references("server")
    state: Mapped[str] = mapped_column(String(16))
    step: Mapped[str | None] = mapped_column(String(64))
    error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime]
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]
    idempotency_key: Mapped[str | None] = mapped_column(String(255))
    fingerprint: Mapped[str | None] = mapped_column(String(128))
    lease_owner: Mapped[str | None] = mapped_column(String(255))
    lease_expires_at: Mapped[datetime | None]
    deadline_at: Mapped[datetime | None]
    attempts: Mapped[int] = mapped_column(default=0, server_default=text("0"))
    image_id: Mapped[str | None] = mapped_column(String(128))  # the image it actually ran
    rollback_of: Mapped[uuid.UUID | None]  # the deployment whose revision it redeploys
    cancel_requested_at: Mapped[datetime | None]  # a running one stops at its next check
    commit: Mapped[str | None] = mapped_column(String(64))  # the Git commit it was built from


class DeploymentEventRow(Base):
    """One line of a deployment's log; append-only, ordered by ``id``."""

    __tablename__ = "deployment_event"

    id: Mapped[int] = mapped_column(_BigIntId, primary_key=True, autoincrement=True)
    deployment_id: Mapped[uuid.UUID] = _references("deployment", index=True)
    at: Mapped[datetime]
    step: Mapped[str] = mapped_column(String(64))
    message: Mapped[str] = mapped_column(Text)


class ContainerSnapshotRow(Base):
    """The last container list seen on a server (one row per server)."""

    __tablename__ = "container_snapshot"

    server_id: Mapped[uuid.UUID] = _references("server", primary_key=True)
    owner_id: Mapped[uuid.UUID] = _references("team")
    observed_at: Mapped[datetime]
    containers: Mapped[list[Any]]


class WebSessionRow(Base):
    """A dashboard sign-in, keyed by the SHA-256 of its id (the cookie is never stored)."""

    __tablename__ = "web_session"

    id_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    user_id: Mapped[uuid.UUID] = _references("user_account", index=True)
    csrf_token: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime]
    last_seen_at: Mapped[datetime]
    expires_at: Mapped[datetime] = mapped_column(index=True)


class InviteRow(Base):
    """A one-time sign-up invitation, keyed by the SHA-256 of its token."""

    __tablename__ = "invite"

    token_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    email: Mapped[str | None] = mapped_column(String(254))
    created_at: Mapped[datetime]
    expires_at: Mapped[datetime]
    used_at: Mapped[datetime | None]


class WorkerRow(Base):
    """A running worker (``berth worker``, or ``berth serve``'s): alive while it renews
    ``expires_at``. The servers it watches name it (``server.watched_by``)."""

    __tablename__ = "worker"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    started_at: Mapped[datetime]
    expires_at: Mapped[datetime]


class StoreMarkRow(Base):
    """Named marks of the store itself: ``fleet`` counts the commits that changed a server
    (a trigger on ``server`` bumps ``version``: the read cache keys the servers list by it);
    ``resumed`` is when the workers' leases were last paused over an outage of the store;
    ``probe`` is written by the readiness check."""

    __tablename__ = "store_mark"

    name: Mapped[str] = mapped_column(String(32), primary_key=True)
    version: Mapped[int] = mapped_column(BigInteger, default=0, server_default=text("0"))
    at: Mapped[datetime | None]


class RateLimitRow(Base):
    """One rate-limit key's GCRA state: when its budget is full again (epoch seconds, the
    database's clock). Used on PostgreSQL, where every API replica shares it."""

    __tablename__ = "rate_limit"

    key: Mapped[str] = mapped_column(String(300), primary_key=True)
    tat: Mapped[float] = mapped_column(Double)


class _SavedPerHost:
    """The columns of credentials saved per host (``host_credentials``): one row per host
    per team, the password sealed and never selected by a listing."""

    @declared_attr.directive
    def __table_args__(cls) -> tuple[Any, ...]:
        return (UniqueConstraint("owner_id", "host"),)

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True)
    owner_id: Mapped[uuid.UUID] = _references("team")
    host: Mapped[str] = mapped_column(String(259))
    username: Mapped[str] = mapped_column(String(255))
    password_sealed: Mapped[bytes]
    created_at: Mapped[datetime]


class RegistryRow(_SavedPerHost, Base):
    """A team's credentials for one registry host."""

    __tablename__ = "registry"


class GitCredentialRow(_SavedPerHost, Base):
    """A team's credentials for one Git host."""

    __tablename__ = "git_credential"


class DeployHookRow(Base):
    """An installation's push-to-deploy hook (one at most): ``id`` is in its URL, its
    secret sealed; ``created_by`` the user its deploys are recorded as."""

    __tablename__ = "deploy_hook"

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True)
    owner_id: Mapped[uuid.UUID] = _references("team", index=True)
    installation_id: Mapped[uuid.UUID] = _references("installation", unique=True)
    created_by: Mapped[uuid.UUID] = _references("user_account")
    secret_sealed: Mapped[bytes]
    created_at: Mapped[datetime]


class WebhookRow(Base):
    """An endpoint of a user's: its URL (which may carry a token) and its signing secret,
    both sealed, and the events it is told of."""

    __tablename__ = "webhook"

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True)
    owner_id: Mapped[uuid.UUID] = _references("team", index=True)
    events: Mapped[list[Any]]
    url_sealed: Mapped[bytes]
    secret_sealed: Mapped[bytes]
    created_at: Mapped[datetime]
    # How a delivery's body reads: ``standard`` (Standard Webhooks), ``slack``, ``discord``.
    format: Mapped[str] = mapped_column(String(16), default="standard", server_default="standard")


class WebhookDeliveryRow(Base):
    """The outbox: one event for one webhook, written in the transaction of the change it
    tells of; claimed under a lease by one worker at a time until delivered or given up.
    ``attempts`` counts the claims; ``log`` holds each attempt's answer."""

    __tablename__ = "webhook_delivery"
    __table_args__ = (
        Index("ix_webhook_delivery_state_next_attempt_at", "state", "next_attempt_at"),
        Index("ix_webhook_delivery_webhook_id_created_at", "webhook_id", "created_at"),
    )

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True)
    webhook_id: Mapped[uuid.UUID] = _references("webhook")
    owner_id: Mapped[uuid.UUID] = _references("team")
    event: Mapped[str] = mapped_column(String(32))
    body: Mapped[bytes]
    created_at: Mapped[datetime]
    state: Mapped[str] = mapped_column(String(16))
    attempts: Mapped[int] = mapped_column(default=0, server_default=text("0"))
    next_attempt_at: Mapped[datetime | None]
    delivered_at: Mapped[datetime | None]
    lease_owner: Mapped[str | None] = mapped_column(String(255))
    lease_expires_at: Mapped[datetime | None]
    log: Mapped[list[Any]]


class OAuthClientRow(Base):
    """An OAuth client that registered itself; its registration (with its secret, if
    any) sealed."""

    __tablename__ = "oauth_client"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    redirect_uris: Mapped[list[Any]]
    metadata_sealed: Mapped[bytes]
    created_at: Mapped[datetime]


class OAuthAuthorizationRow(Base):
    """A client's authorization request, pending until the user answers; then, with the
    user's choice, its one-time code (hashed)."""

    __tablename__ = "oauth_authorization"
    __table_args__ = (Index("ix_oauth_authorization_expires_at", "expires_at"),)

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True)
    client_id: Mapped[str] = mapped_column(
        String(64), ForeignKey("oauth_client.id", ondelete="CASCADE")
    )
    redirect_uri: Mapped[str] = mapped_column(Text)
    redirect_uri_explicit: Mapped[bool]
    code_challenge: Mapped[str] = mapped_column(String(128))
    state: Mapped[str | None] = mapped_column(Text)
    resource: Mapped[str | None] = mapped_column(Text)
    requested_scopes: Mapped[list[Any] | None]
    created_at: Mapped[datetime]
    expires_at: Mapped[datetime]
    code_hash: Mapped[str | None] = mapped_column(String(128), unique=True)
    user_id: Mapped[uuid.UUID | None] = _references("user_account")
    team_id: Mapped[uuid.UUID | None] = _references("team")
    scopes: Mapped[list[Any] | None]
    server_ids: Mapped[list[Any] | None]


class OAuthGrantRow(Base):
    """An approved client's refresh token (hashed) and the named token it minted last."""

    __tablename__ = "oauth_grant"
    __table_args__ = (Index("ix_oauth_grant_expires_at", "expires_at"),)

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True)
    refresh_hash: Mapped[str] = mapped_column(String(128), unique=True)
    client_id: Mapped[str] = mapped_column(
        String(64), ForeignKey("oauth_client.id", ondelete="CASCADE")
    )
    user_id: Mapped[uuid.UUID] = _references("user_account")
    team_id: Mapped[uuid.UUID] = _references("team")
    scopes: Mapped[list[Any]]
    server_ids: Mapped[list[Any] | None]
    resource: Mapped[str | None] = mapped_column(Text)
    token_id: Mapped[uuid.UUID] = mapped_column(index=True)
    created_at: Mapped[datetime]
    expires_at: Mapped[datetime]
