"""Core values for tests, whole and plausible: each builder takes any field to change.

Unit tests hand them to fakes, integration tests store them through the SQL adapter;
a test names only the fields its behaviour depends on.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from uuid import uuid4

import msgspec
from berth.core import models as m

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


def a_user(**changes: Any) -> m.User:
    """A user of a unique email."""
    user = m.User(
        id=uuid4(),
        email=f"user-{uuid4().hex[:12]}@example.com",
        password_hash="argon2$x",
        created_at=T0,
    )
    return msgspec.structs.replace(user, **changes)


def a_server(**changes: Any) -> m.Server:
    """An SSH server of a unique name, online, of an owner of its own."""
    server = m.Server(
        id=uuid4(),
        owner_id=uuid4(),
        name=f"srv-{uuid4().hex[:8]}",
        transport=m.Transport.SSH,
        address="203.0.113.7",
        ssh_port=22,
        ssh_user="berth",
        status=m.ServerStatus.ONLINE,
        created_at=T0,
    )
    return msgspec.structs.replace(server, **changes)


def a_container(**changes: Any) -> m.Container:
    """A running container ``shop`` of ``shop:1.0`` that berth did not make, no ports."""
    container = m.Container(
        id="c1",
        name="shop",
        image="shop:1.0",
        state="running",
        status="Up",
        created_at=T0,
        ports=(),
        installation_id=None,
    )
    return msgspec.structs.replace(container, **changes)


def a_spec(**changes: Any) -> m.DeploymentSpec:
    """What an installation runs: ``shop:1.0`` on port 8080, no domain, env or volume."""
    spec = m.DeploymentSpec(image="shop:1.0", port=8080, domain=None, env_keys=(), volumes=())
    return msgspec.structs.replace(spec, **changes)


def an_installation(server: m.Server, **changes: Any) -> m.Installation:
    """A pending installation of a unique name on ``server`` (its container named alike)."""
    name = changes.pop("name", f"app-{uuid4().hex[:8]}")
    installation = m.Installation(
        id=uuid4(),
        server_id=server.id,
        name=name,
        container_name=name,
        spec=a_spec(),
        host_port=None,
        status=m.InstallationStatus.PENDING,
        created_at=T0,
        updated_at=T0,
    )
    return msgspec.structs.replace(installation, **changes)


def a_deployment(installation: m.Installation | None = None, **changes: Any) -> m.Deployment:
    """A queued deployment of ``installation``'s spec (without one: of an installation
    and server of their own)."""
    deployment = m.Deployment(
        id=uuid4(),
        installation_id=installation.id if installation else uuid4(),
        server_id=installation.server_id if installation else uuid4(),
        spec=installation.spec if installation else a_spec(),
        state=m.DeploymentState.QUEUED,
        step=None,
        error=None,
        created_at=T0,
    )
    return msgspec.structs.replace(deployment, **changes)
