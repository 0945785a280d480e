"""The library facade: a Berth opened on a data dir, the use cases as methods."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path
from uuid import UUID

from berth.core.commands import parse_create_server, parse_deploy
from berth.core.errors import Conflict, CoreError, InvalidInput, NotFound, Unauthorized
from berth.core.models import Deployment, Installation, Server, User
from berth.core.use_cases import ContainerList, DeployResult, InstallationList
from berth.entrypoints.bootstrap import Services, bootstrap
from berth.entrypoints.logging import configure_library_logging
from berth.entrypoints.settings import Settings

__all__ = [
    "Berth",
    "Conflict",
    "CoreError",
    "DeployResult",
    "InvalidInput",
    "NotFound",
    "Settings",
    "Unauthorized",
    "open",
]


class Berth:
    """A berth opened on a data dir (or database URL): the use cases as methods."""

    def __init__(self, services: Services) -> None:
        self.services = services

    async def create_user(self, email: str, password: str) -> User:
        return await self.services.create_user(email, password)

    async def regenerate_token(self, user: User) -> str:
        """A new API token for ``user``; the previous one stops working at once."""
        return await self.services.regenerate_token(user=user)

    async def authenticate(self, token: str) -> User:
        return await self.services.authenticate(token)

    async def create_server(
        self, user: User, *, name: str, address: str | None = None, ssh_port: int = 22
    ) -> Server:
        raw: dict[str, object] = {"name": name, "sshPort": ssh_port}
        if address is not None:
            raw["address"] = address
        created = await self.services.create_server(user, parse_create_server(raw, loc="server"))
        return created.server

    async def list_servers(self, user: User) -> list[Server]:
        return await self.services.list_servers(user)

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
        return await self.services.deploy(user, cmd)

    async def deployment(self, user: User, deployment_id: UUID) -> Deployment:
        return await self.services.get_deployment(user, deployment_id)

    async def installations(self, user: User, server_id: UUID) -> InstallationList:
        return await self.services.list_installations(user, server_id)

    async def installation(self, user: User, installation_id: UUID) -> Installation:
        return (await self.services.get_installation(user, installation_id))[1]

    async def containers(self, user: User, server_id: UUID) -> ContainerList:
        return await self.services.list_containers(user, server_id)


@asynccontextmanager
async def open(
    data_dir: str | Path = "./data", *, database_url: str | None = None
) -> AsyncIterator[Berth]:
    """Open (creating and migrating if needed) the berth stored in ``data_dir``."""
    configure_library_logging()
    settings = replace(Settings(), data_dir=Path(data_dir), database_url=database_url)
    runtime = await bootstrap(settings)
    try:
        yield Berth(runtime.services)
    finally:
        await runtime.close()
