"""A server speaking for itself: requests signed with its pinned SSH host key (SSHSIG),
for its status and to report ``--uninstall``; and the SSH port a user gave."""

from __future__ import annotations

import hashlib
import struct
from typing import Any
from uuid import UUID, uuid4

import asyncssh
import pytest
from berth.core import commands as c
from berth.core.commands import (
    EnrollCommand,
    ServerSignature,
    parse_create_server,
)
from berth.core.errors import Conflict, Unauthorized
from berth.core.models import ServerStatus, User
from berth.core.use_cases.server_self import (
    MAX_CLOCK_SKEW,
    SIGNATURE_NAMESPACE,
    signed_message,
)
from test_use_cases import deploy_cmd
from wiring import App


def _string(value: bytes) -> bytes:
    return struct.pack(">I", len(value)) + value


def sshsig(key: asyncssh.SSHKey, message: bytes, namespace: str = SIGNATURE_NAMESPACE) -> bytes:
    """What ``ssh-keygen -Y sign -n namespace`` makes of ``message`` (unarmored)."""
    digest = hashlib.sha512(message).digest()
    signed = b"SSHSIG" + _string(namespace.encode()) + _string(b"") + _string(b"sha512")
    signature = key.sign(signed + _string(digest), b"ssh-ed25519")
    return (
        b"SSHSIG"
        + struct.pack(">I", 1)
        + _string(key.public_data)
        + _string(namespace.encode())
        + _string(b"")
        + _string(b"sha512")
        + _string(signature)
    )


def public_line(key: asyncssh.SSHKey) -> str:
    return " ".join(key.export_public_key("openssh").decode().split()[:2])


async def enrolled(app: App, owner: User, key: asyncssh.SSHKey, **body: Any) -> UUID:
    created = await app.bus.handle(
        parse_create_server({"name": f"s-{uuid4().hex[:8]}", **body}), owner
    )
    await app.bus.handle(
        c.EnrollServer(
            token=created.enrollment_token,
            enrollment=EnrollCommand(host_keys=(public_line(key),)),
            client_address=None,
        )
    )
    return created.server.id


def signed(
    app: App,
    key: asyncssh.SSHKey,
    server_id: UUID,
    *,
    method: str = "POST",
    path: str = "/api/agent/servers/self/uninstall",
    at: int | None = None,
    signed_path: str | None = None,
    namespace: str = SIGNATURE_NAMESPACE,
) -> ServerSignature:
    when = int(app.clock.now().timestamp()) if at is None else at
    message = signed_message(method, signed_path or path, server_id, when)
    return ServerSignature(
        server_id=server_id,
        signed_at=when,
        signature=sshsig(key, message, namespace),
        method=method,
        path=path,
    )


@pytest.fixture
def host_key() -> asyncssh.SSHKey:
    return asyncssh.generate_private_key("ssh-ed25519")


class TestSignedRequests:
    async def test_the_pinned_key_reads_the_status(
        self, app: App, owner: User, host_key: asyncssh.SSHKey
    ) -> None:
        """Signed with the pinned host key: the server's own status."""
        server_id = await enrolled(app, owner, host_key)
        sig = signed(app, host_key, server_id, method="GET", path="/api/agent/servers/self")
        server = await app.bus.handle(c.ServerSelfStatus(signature=sig))
        assert (server.id, server.status) == (server_id, ServerStatus.OFFLINE)

    @pytest.mark.parametrize(
        "tamper",
        ["other-key", "other-path", "other-namespace", "stale", "future", "other-server", "junk"],
    )
    async def test_anything_else_is_refused(
        self, app: App, owner: User, host_key: asyncssh.SSHKey, tamper: str
    ) -> None:
        """Another key, path, namespace or server, a time past five minutes, or bytes
        that are no SSHSIG: Unauthorized, and the server stays as it was."""
        server_id = await enrolled(app, owner, host_key)
        other = await enrolled(app, owner, asyncssh.generate_private_key("ssh-ed25519"))
        now = int(app.clock.now().timestamp())
        skew = int(MAX_CLOCK_SKEW.total_seconds()) + 1
        sig = {
            "other-key": lambda: signed(
                app, asyncssh.generate_private_key("ssh-ed25519"), server_id
            ),
            "other-path": lambda: signed(app, host_key, server_id, signed_path="/x"),
            "other-namespace": lambda: signed(app, host_key, server_id, namespace="file"),
            "stale": lambda: signed(app, host_key, server_id, at=now - skew),
            "future": lambda: signed(app, host_key, server_id, at=now + skew),
            "other-server": lambda: signed(app, host_key, other),
            "junk": lambda: ServerSignature(
                server_id=server_id,
                signed_at=now,
                signature=b"SSHSIG\0",
                method="POST",
                path="/api/agent/servers/self/uninstall",
            ),
        }[tamper]()
        with pytest.raises(Unauthorized):
            await app.bus.handle(c.ReportUninstalled(signature=sig))
        assert app.store.state.servers[server_id].status is ServerStatus.OFFLINE
        assert app.gateway.disconnected == []


class TestReportUninstalled:
    async def test_marks_removed_drops_the_connection_and_refuses_deploys(
        self, app: App, owner: User, host_key: asyncssh.SSHKey
    ) -> None:
        """removed, with when; the pooled connection dropped; a deploy is a 409 at once;
        a second report changes nothing."""
        server_id = await enrolled(app, owner, host_key)
        server = await app.bus.handle(
            c.ReportUninstalled(signature=signed(app, host_key, server_id))
        )
        assert server.status is ServerStatus.REMOVED
        assert server.status_detail is not None
        assert server.status_detail.startswith("Uninstalled by its install script")
        assert app.gateway.disconnected == [server_id]
        stored = app.store.state.servers[server_id]
        assert stored.status is ServerStatus.REMOVED
        with pytest.raises(Conflict) as refused:
            await app.bus.handle(deploy_cmd(server_id), owner)
        assert refused.value.kind == "server-removed"
        again = await app.bus.handle(
            c.ReportUninstalled(signature=signed(app, host_key, server_id))
        )
        assert again.status_detail == stored.status_detail


class TestSshPort:
    @pytest.mark.parametrize(
        ("given", "reported", "kept"), [(None, 2222, 2222), (22, 2222, 2222), (2200, 2200, 2200)]
    )
    async def test_default_port_is_replaced_a_given_one_kept(
        self, app: App, owner: User, given: int | None, reported: int, kept: int
    ) -> None:
        """Without a port (or 22) the script's replaces it; the same port is fine."""
        body = {"name": f"s-{uuid4().hex[:8]}"} | ({"ssh_port": given} if given else {})
        created = await app.bus.handle(parse_create_server(body), owner)
        key = public_line(asyncssh.generate_private_key("ssh-ed25519"))
        enrollment = EnrollCommand(host_keys=(key,), ssh_port=reported)
        server = await app.bus.handle(
            c.EnrollServer(token=created.enrollment_token, enrollment=enrollment)
        )
        assert server.ssh_port == kept

    async def test_a_different_port_than_the_given_one_is_a_conflict(
        self, app: App, owner: User
    ) -> None:
        """Added with 2200, enrolled reporting 2222: Conflict naming ssh_port, still pending."""
        created = await app.bus.handle(
            parse_create_server({"name": f"s-{uuid4().hex[:8]}", "ssh_port": 2200}), owner
        )
        key = public_line(asyncssh.generate_private_key("ssh-ed25519"))
        enrollment = EnrollCommand(host_keys=(key,), ssh_port=2222)
        with pytest.raises(Conflict) as refused:
            await app.bus.handle(
                c.EnrollServer(token=created.enrollment_token, enrollment=enrollment)
            )
        assert refused.value.field == "ssh_port"
        stored = app.store.state.servers[created.server.id]
        assert (stored.status, stored.ssh_port) == (ServerStatus.PENDING, 2200)
