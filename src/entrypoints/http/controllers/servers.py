"""``/api/agent/servers``: your servers, their containers and Docker disk usage, their
install command and host keys."""

from __future__ import annotations

from typing import Any

from berth.core import commands as c
from berth.core.models import ServerStatus
from berth.core.paging import page
from berth.core.results import CreatedServer
from litestar import Controller, Request, Response, delete, get, patch, post
from litestar.di import NamedDependency
from litestar.params import JSONBody

from ...install import install_command
from ...settings import Settings
from ..openapi import documented
from ..parameters import Cursor, ListLimit, NameQuery, ServerId, ServerStatusQuery
from ..schemas import (
    ContainerListOut,
    CreatedServerOut,
    ServerDiskOut,
    ServerListOut,
    ServerListResponse,
    ServerOut,
    container_list_out,
    server_disk_out,
    server_list_out,
    server_out,
)
from ..urls import base_url
from .common import DOCKER, READ, SERVER_READ, WRITE, Caller

__all__ = ["ServerController"]

Req = Request[Any, Any, Any]


class ServerController(Controller):
    path = "/servers"

    @documented(get, "/", "listServers", responses=READ, response_class=ServerListResponse)
    async def list_servers(
        self,
        caller: NamedDependency[Caller],
        status: ServerStatusQuery = None,
        name: NameQuery = None,
        limit: ListLimit = None,
        cursor: Cursor = None,
    ) -> ServerListOut:
        """List your servers

        Every server of the token's user, with its status (`pending` until its install
        script enrolls it, then `online` or `offline`; `host_key_mismatch` when it offered
        an SSH host key other than the pinned ones: see `offeredHostKeyFingerprint` and POST
        /api/agent/servers/{serverId}/host-keys) and facts.

        Returns:
            Your servers.
        """
        wanted = None if status is None else ServerStatus(status)
        servers = await caller(c.ListServers(status=wanted, name=name))
        found = page(servers, limit=limit, cursor=cursor, key=lambda s: s.id, what="server")
        return server_list_out(found.items, found.next_cursor)  # encoded once while unchanged

    @documented(post, "/", "createServer", responses=WRITE)
    async def create_server(
        self,
        request: Req,
        caller: NamedDependency[Caller],
        settings: NamedDependency[Settings],
        data: JSONBody[c.CreateServerCommand],
    ) -> Response[CreatedServerOut]:
        """Add a server (returns a one-time enrollment token and the install command)

        Creates a `pending` server. Run `installCommand` on it, as root or as a user with
        sudo (it carries the enrollment token, valid once, for one hour, in the script's
        environment, and `--ssh-port` when `sshPort` is not 22); or give `hostKeys` with an
        `address` and it is reachable at once. `sshPort` is the port berth connects to
        (default 22).

        Returns:
            The new server, its enrollment token and its install command.

        Raises:
            409: You have as many servers as one user may add (`server-limit`): delete one
                first.
        """
        body = _created_out(request, settings, await caller(data))
        return Response(
            body, status_code=201, headers={"Location": f"/api/agent/servers/{body.id}"}
        )

    @documented(
        post,
        "/{serverId:str}/enrollment-token",
        "newEnrollmentToken",
        status_code=200,
        responses=READ,
    )
    async def new_enrollment_token(
        self,
        request: Req,
        caller: NamedDependency[Caller],
        settings: NamedDependency[Settings],
        server_id: ServerId,
    ) -> CreatedServerOut:
        """A new install command for a pending server

        For a server still `pending` (its install script has not enrolled it): issues a new
        one-time enrollment token, valid once, for one hour, and its install command, as
        POST /api/agent/servers does. The server's previous enrollment token stops working
        at once. No body. A server that is not `pending` is a 409 `server-not-pending`, and
        nothing changes.

        Returns:
            The server, its new enrollment token and its install command.

        Raises:
            409: The server has enrolled already, or was added with its host keys
                (server-not-pending): it needs no install command.
        """
        created = await caller(c.NewEnrollmentToken(server_id=server_id))
        return _created_out(request, settings, created)

    @documented(get, "/{serverId:str}", "getServer", responses=READ)
    async def get_server(self, caller: NamedDependency[Caller], server_id: ServerId) -> ServerOut:
        """One of your servers

        A server of yours by id; another user's server is a 404, like a missing one.

        Returns:
            The server.
        """
        return server_out(await caller(c.GetServer(server_id=server_id)))

    @documented(patch, "/{serverId:str}", "changeServer", responses=WRITE)
    async def change_server(
        self, caller: NamedDependency[Caller], server_id: ServerId, data: JSONBody[c.ChangeServer]
    ) -> ServerOut:
        """Change a server's name, address or SSH port

        Changes one of your servers in place: its id, apps and deployment history stay (no
        need to delete it and add it again). Each field given replaces the stored one; a
        field left out is kept; `null` is refused. A new `address` or `sshPort` is checked
        at once: the server goes `offline` until berth reaches it there, with the pinned
        host keys (a server in `host_key_mismatch` is checked again at the new address; a
        `pending` one stays `pending`, waiting for its install script).

        Returns:
            The server as changed.
        """
        return server_out(await caller(data))

    @documented(delete, "/{serverId:str}", "deleteServer", responses=READ)
    async def delete_server(self, caller: NamedDependency[Caller], server_id: ServerId) -> None:
        """Forget a server: its record, installations and deployments; its containers run on

        Nothing on the server is touched. Refused (409) while a deployment on it runs, and
        for this machine under `berth serve --local`.

        Returns:
            Forgotten: the server, its installations and deployments are gone from berth;
            nothing on the server was touched.

        Raises:
            409: Refused, nothing forgotten (conflict): a deployment on the server is
                running (wait for it), or it is this machine under `berth serve --local`.
        """
        await caller(c.DeleteServer(server_id=server_id))

    @documented(
        post, "/{serverId:str}/host-keys", "repinHostKeys", status_code=200, responses=WRITE
    )
    async def repin_host_keys(
        self, caller: NamedDependency[Caller], server_id: ServerId, data: JSONBody[c.RepinHostKeys]
    ) -> ServerOut:
        """Re-pin a server's SSH host keys after a legitimate change

        For a server in status `host_key_mismatch` (it offered an SSH host key other than
        the pinned ones, so berth does not connect and refuses deploys): `hostKeys` replace
        every pinned key and must include the key it offered (`offeredHostKey`, else 409
        `fingerprint-mismatch` naming `body.hostKeys`); `fingerprint` is that key's SHA-256
        fingerprint as you checked it on the server (`ssh-keygen -lf
        /etc/ssh/ssh_host_ed25519_key.pub`) and must equal `offeredHostKeyFingerprint` (else
        409 `fingerprint-mismatch`). A server not in `host_key_mismatch` is a 409
        `no-host-key-change`. The server then goes `offline` and berth reconnects with the
        new keys at its next check.

        Returns:
            The server, `offline` with its new pinned keys.

        Raises:
            409: The server has not offered a new host key (`no-host-key-change`), or
                `fingerprint` is not the offered key's, or `hostKeys` lack it
                (`fingerprint-mismatch`, naming `body.fingerprint` or `body.hostKeys`).
        """
        return server_out(await caller(data))

    @documented(get, "/{serverId:str}/containers", "listContainers", responses=SERVER_READ)
    async def list_containers(
        self, caller: NamedDependency[Caller], server_id: ServerId
    ) -> ContainerListOut:
        """Every container on one of your servers

        Live from the server when it answers; otherwise the last list seen, with
        `observedAt` and `serverStatus: offline`. Includes containers berth does not manage
        (`installationId: null`).

        Returns:
            The server's containers.
        """
        return container_list_out(await caller(c.ListContainers(server_id=server_id)))

    @documented(get, "/{serverId:str}/disk", "getServerDiskUsage", responses=DOCKER)
    async def server_disk(
        self, caller: NamedDependency[Caller], server_id: ServerId
    ) -> ServerDiskOut:
        """What Docker keeps on one of your servers' disk

        Asked now of the server's Docker Engine (its `/system/df`, as `docker system df`):
        images (shared layers counted once), containers' writable layers, volumes and the
        build cache, in bytes. Can take a few seconds on a server with many images. An
        unreachable server is a 503.

        Returns:
            The server's Docker disk usage.
        """
        return server_disk_out(await caller(c.GetServerDiskUsage(server_id=server_id)))


def _created_out(request: Req, settings: Settings, created: CreatedServer) -> CreatedServerOut:
    """A server with its one-time enrollment token and the install command carrying it."""
    server = server_out(created.server)
    expires = created.server.enrollment_expires_at
    assert expires is not None
    return CreatedServerOut(
        **{f: getattr(server, f) for f in server.__struct_fields__},
        enrollment_token=created.enrollment_token,
        enrollment_expires_at=expires,
        install_command=install_command(
            base_url(request, settings), created.enrollment_token, created.server.ssh_port
        ),
    )
