"""``/api/agent/registries``: credentials for private registries."""

from __future__ import annotations

from berth.core import commands as c
from litestar import Controller, delete, get, post
from litestar.di import NamedDependency
from litestar.params import JSONBody

from ..openapi import documented
from ..parameters import RegistryId
from ..schemas import RegistryListOut, RegistryOut, registry_out
from .common import AUTH, READ, WRITE, Caller

__all__ = ["RegistryController"]


class RegistryController(Controller):
    path = "/registries"

    @documented(get, "/", "listRegistries", responses=AUTH)
    async def list_registries(self, caller: NamedDependency[Caller]) -> RegistryListOut:
        """List your private registries

        The registries you saved credentials for, by host: `host`, `username` and when it
        was added. A password is never returned.

        Returns:
            Your registries.
        """
        found = await caller(c.ListRegistries())
        return RegistryListOut(registries=[registry_out(r) for r in found])

    @documented(post, "/", "addRegistry", responses=WRITE)
    async def add_registry(
        self, caller: NamedDependency[Caller], data: JSONBody[c.AddRegistry]
    ) -> RegistryOut:
        """Save credentials for a private registry

        A deploy of an image whose registry is `host` (the image reference's first
        component, when it has a `.` or a `:` or is `localhost`, as Docker reads it) pulls
        with these credentials (Docker's `X-Registry-Auth`), over SSH and local alike.
        `host` is `hostname[:port]` with no scheme, path or whitespace, stored lowercased
        (`index.docker.io` is `docker.io`); one entry per host per user. `password` is a
        password or an access token: sealed at rest, never returned, never logged.

        Returns:
            The saved registry (never its password).

        Raises:
            409: You already have credentials for this host (`registry-exists`: remove them
                first to replace them), or you have 100 registries (`registry-limit`).
        """
        return registry_out(await caller(data))

    @documented(delete, "/{registryId:str}", "removeRegistry", responses=READ)
    async def remove_registry(
        self, caller: NamedDependency[Caller], registry_id: RegistryId
    ) -> None:
        """Forget a private registry's credentials

        Deploys of images from its host pull without credentials from then on (a deployment
        already claimed by a worker keeps the ones it read). Another user's registry is a
        404, like a missing one.

        Returns:
            Forgotten: deploys from that host pull without credentials.
        """
        await caller(c.RemoveRegistry(registry_id=registry_id))
