"""The library facade: a Berth opened on a data dir, the use cases as methods.

Every argument goes through the core's parsers, as the API's input does: a
library caller gets the same rules and the same errors (``InvalidInput`` listing
every broken field, ``NotFound`` for what is not the caller's).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path
from uuid import UUID

from berth.core.commands import (
    parse_count,
    parse_create_server,
    parse_deploy,
    parse_id,
    parse_seconds,
)
from berth.core.errors import (
    Conflict,
    CoreError,
    FieldError,
    InvalidInput,
    NotFound,
    RuntimeFailure,
    ServerUnreachable,
    Unauthorized,
)
from berth.core.models import (
    Deployment,
    DeploymentState,
    Installation,
    Server,
    ServerStatus,
    User,
)
from berth.core.use_cases import (
    ContainerList,
    DeployResult,
    InstallationList,
    ListDeployments,
    Logs,
)
from berth.core.use_cases.installations import MAX_TAIL
from berth.entrypoints.bootstrap import Services, bootstrap
from berth.entrypoints.logging import configure_library_logging
from berth.entrypoints.settings import Settings
from berth.entrypoints.worker import Background

__all__ = [
    "Berth",
    "Conflict",
    "ContainerList",
    "CoreError",
    "DeployResult",
    "Deployment",
    "DeploymentState",
    "FieldError",
    "Installation",
    "InstallationList",
    "InvalidInput",
    "Logs",
    "NotFound",
    "RuntimeFailure",
    "Server",
    "ServerStatus",
    "ServerUnreachable",
    "Settings",
    "Unauthorized",
    "User",
    "open",
]

TAIL_DEFAULT = 100  # as the API's ?tail
WAIT_DEFAULT = 300.0  # the API's longest ?wait


class Berth:
    """A berth opened on a data dir (or database URL): the use cases as methods."""

    POLL_SECONDS = 0.5  # how often ``wait`` reads the store between wake-ups

    def __init__(
        self, services: Services, *, worker: bool = False, background: Background | None = None
    ) -> None:
        """``worker``: deployments run in ``background``, so ``wait`` is woken when one ends."""
        self.services = services
        self.worker = worker
        self._background = background

    # -- users -------------------------------------------------------------------------

    async def create_user(self, email: str, password: str) -> User:
        """A new user; under ``local=True`` the first one gets this machine as a server."""
        user = await self.services.create_user(email, password)
        if self._background is not None:
            self._background.check_servers()  # registers this machine now, not in 5 s
        return user

    async def regenerate_token(self, user: User) -> str:
        """A new API token for ``user``; the previous one stops working at once."""
        return await self.services.regenerate_token(user=user)

    async def authenticate(self, token: str) -> User:
        """The user an API token belongs to (``Unauthorized`` otherwise)."""
        return await self.services.authenticate(token)

    # -- servers -----------------------------------------------------------------------

    async def create_server(
        self,
        user: User,
        *,
        name: str,
        address: str | None = None,
        ssh_port: int = 22,
        ssh_user: str | None = None,
        host_keys: Sequence[str] | None = None,
    ) -> Server:
        """Register a server (reachable at once with ``host_keys``, else ``pending``)."""
        raw: dict[str, object] = {"name": name, "sshPort": ssh_port}
        if address is not None:
            raw["address"] = address
        if ssh_user is not None:
            raw["sshUser"] = ssh_user
        if host_keys is not None:
            raw["hostKeys"] = list(host_keys)
        created = await self.services.create_server(user, parse_create_server(raw, loc="server"))
        return created.server

    async def list_servers(self, user: User) -> list[Server]:
        """The user's servers."""
        return await self.services.list_servers(user)

    async def server(self, user: User, server_id: UUID | str) -> Server:
        """One of the user's servers, with its status."""
        return await self.services.get_server(user, parse_id(server_id, "Server"))

    async def delete_server(self, user: User, server_id: UUID | str) -> None:
        """Forget a server, its installations and deployments; its containers run on."""
        await self.services.delete_server(user, parse_id(server_id, "Server"))

    async def containers(self, user: User, server_id: UUID | str) -> ContainerList:
        """Every container on a server: live, or the last snapshot while it is unreachable."""
        return await self.services.list_containers(user, parse_id(server_id, "Server"))

    # -- deployments -------------------------------------------------------------------

    async def deploy(
        self,
        user: User,
        *,
        server_id: UUID | str,
        name: str,
        image: str,
        port: int | None = None,
        domain: str | None = None,
        env: Mapping[str, str] | None = None,
        volumes: Sequence[str] | None = None,
        idempotency_key: str | None = None,
    ) -> DeployResult:
        """Queue a deployment; the rules are the API's (``InvalidInput`` lists every error)."""
        raw: dict[str, object] = {"serverId": str(server_id), "name": name, "image": image}
        if port is not None:
            raw["port"] = port
        if domain is not None:
            raw["domain"] = domain
        if env is not None:
            raw["env"] = dict(env)
        if volumes is not None:
            raw["volumes"] = list(volumes)
        cmd = parse_deploy(raw, loc="deploy", idempotency_key=idempotency_key)
        result = await self.services.deploy(user, cmd)
        self.services.notifier.queued()  # wakes a worker in this process at once
        return result

    async def deployment(self, user: User, deployment_id: UUID | str) -> Deployment:
        """One deployment of the user's, with its step events."""
        return await self.services.get_deployment(user, parse_id(deployment_id, "Deployment"))

    async def deployments(
        self, user: User, server_id: UUID | str, *, limit: int = 20
    ) -> list[Deployment]:
        """The newest deployments on a server (``limit`` 1-100), newest first."""
        count = parse_count(limit, loc="deployments.limit", low=1, high=ListDeployments.MAX_LIMIT)
        return await self.services.list_deployments(user, parse_id(server_id, "Server"), count)

    async def wait(
        self,
        user: User,
        deployment_id: UUID | str,
        # Not asyncio.timeout's job: at the timeout the deployment is returned, not an error.
        timeout: float = WAIT_DEFAULT,  # noqa: ASYNC109
    ) -> Deployment:
        """The deployment once final, or as it stands when ``timeout`` seconds have passed."""
        seconds = parse_seconds(timeout, loc="wait.timeout")
        key = parse_id(deployment_id, "Deployment")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        deployment = await self.services.get_deployment(user, key)
        while not deployment.state.is_final:
            left = deadline - loop.time()
            if left <= 0:
                break
            # A worker in this process wakes us when it ends the deployment; the store
            # is read again at least every POLL_SECONDS all the same, for a worker in
            # another process and for an end that came just before we began to listen.
            pause = min(self.POLL_SECONDS, left)
            if self.worker:
                await self.services.notifier.wait_finished(key, pause)
            else:
                await asyncio.sleep(pause)
            deployment = await self.services.get_deployment(user, key)
        return deployment

    # -- installations -----------------------------------------------------------------

    async def installations(self, user: User, server_id: UUID | str) -> InstallationList:
        """The installations (apps) on a server, with the server."""
        return await self.services.list_installations(user, parse_id(server_id, "Server"))

    async def installation(self, user: User, installation_id: UUID | str) -> Installation:
        """One installation of the user's."""
        key = parse_id(installation_id, "Installation")
        return (await self.services.get_installation(user, key))[1]

    async def logs(
        self, user: User, installation_id: UUID | str, *, tail: int = TAIL_DEFAULT
    ) -> Logs:
        """The last ``tail`` lines (1-5000) of the installation's container, env redacted."""
        lines = parse_count(tail, loc="logs.tail", low=1, high=MAX_TAIL)
        key = parse_id(installation_id, "Installation")
        return await self.services.installation_logs(user, key, lines)

    async def remove_installation(self, user: User, installation_id: UUID | str) -> None:
        """Remove the installation's containers, then its record (``Conflict`` while running)."""
        key = parse_id(installation_id, "Installation")
        await self.services.remove_installation(user, key)


@asynccontextmanager
async def open(
    data_dir: str | Path = "./data",
    *,
    database_url: str | None = None,
    worker: bool = False,
    local: bool = False,
    settings: Settings | None = None,
) -> AsyncIterator[Berth]:
    """Open (creating and migrating if needed) the berth stored in ``data_dir``."""
    # worker: deployments run and servers are watched in this process (serve's Background)
    # until the block exits. local: this machine is a server of the first user (serve
    # --local); servers are then watched even without worker, as under serve --no-worker.
    # settings gives the rest (timeouts, Docker socket, Caddy); data_dir, worker and local
    # are the arguments', database_url the argument's if given.
    configure_library_logging()
    base = settings or Settings()
    chosen = replace(
        base,
        data_dir=Path(data_dir),
        database_url=database_url or base.database_url,
        local=local,
        worker=worker,
    )
    runtime = await bootstrap(chosen, background=worker or local)
    try:
        if runtime.background is not None:
            await runtime.background.start(worker=worker)
        yield Berth(runtime.services, worker=worker, background=runtime.background)
    finally:
        await runtime.close()  # stops the worker and the monitor first
