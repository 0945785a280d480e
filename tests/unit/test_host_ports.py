"""Host-port diagnostics: who holds a port before a deploy (``port_holder``, the deploy's
409 ``port-in-use``), and the port the app logged after a failed health check."""

from __future__ import annotations

import msgspec
import pytest
from berth.core.commands import parse_deploy
from berth.core.errors import Conflict
from berth.core.models import Server, ServerStatus, User
from berth.core.use_cases.host_ports import logged_port, logged_port_hint, port_holder
from hypothesis import given
from hypothesis import strategies as st
from wiring import App


def _online(app: App, server: Server) -> None:
    state = app.store.state
    state.servers[server.id] = msgspec.structs.replace(server, status=ServerStatus.ONLINE)


def _deploy(server: Server, name: str = "web", port: int = 8091, **more: object) -> object:
    raw = {"server_id": str(server.id), "name": name, "image": "nginx:1.27", "port": port}
    return parse_deploy({**raw, **more})


class TestLoggedPortHint:
    @pytest.mark.parametrize(
        ("line", "phrase"),
        [
            ("listening on 3000", "listening on 3000"),
            ("Listening on http://0.0.0.0:3000", "Listening on http://0.0.0.0:3000"),
            ("INFO server running on port 5000 (press CTRL+C)", "running on port 5000"),
            ("Started server on :8080", "Started server on :8080"),
            ("listening on 127.0.0.1:9999.", "listening on 127.0.0.1:9999"),
        ],
    )
    def test_another_port_in_the_output_is_named(self, line: str, phrase: str) -> None:
        """The phrase that names the port is quoted with the port deployed."""
        hint = logged_port_hint(["booting", line], 8091)
        assert hint == f"the app logged {phrase!r}; it was deployed with port 8091"

    @pytest.mark.parametrize(
        "line",
        ["listening on 8091", "ready in 3000 ms", "connected to db:5432", "GET / 200 3000"],
    )
    def test_the_same_port_or_no_listening_phrase_is_no_hint(self, line: str) -> None:
        """Its own port, or numbers that do not say where the app listens, say nothing."""
        assert logged_port_hint([line], 8091) is None

    @given(port=st.integers(1, 65535), other=st.integers(10, 65535))
    def test_a_listening_line_hints_exactly_when_the_ports_differ(
        self, port: int, other: int
    ) -> None:
        """ "listening on N" hints when N is not the deployed port, and names both."""
        hint = logged_port_hint([f"listening on {other}"], port)
        if other == port:
            assert hint is None
        else:
            assert hint is not None
            assert f"listening on {other}" in hint
            assert hint.endswith(f"port {port}")


class TestLoggedPort:
    def test_a_line_naming_its_own_port_too_is_no_hint(self) -> None:
        """An app that logs a side port and its own one listens where it should: no
        hint (the health wait does not end early for it)."""
        lines = ["metrics listening on :9090", "listening on 8091"]
        assert logged_port(lines, 8091) is None
        assert logged_port(lines[:1], 8091) == ("listening on :9090", 9090)


class TestPortHolder:
    async def test_names_the_installation_the_container_or_a_process(
        self, app: App, server: Server
    ) -> None:
        """A managed container is named by its installation, another by its container
        name; a port that only accepts connections is a process outside Docker."""
        runtime = app.gateway.runtime(server.id)
        conn = await app.gateway.connect(server)
        owned = runtime.add("shop", {"berth.installation": str(server.id)}, host_port=8091)
        runtime.add("db", host_port=5432)
        runtime.refused_ports.add(9000)
        names = {server.id: "shop"}
        assert await port_holder(conn, 8091, names, None) == "the app 'shop'"
        assert await port_holder(conn, 5432, names, None) == "container 'db'"
        assert await port_holder(conn, 9000, names, None) == (
            "a process on the server outside Docker"
        )
        assert await port_holder(conn, 8092, names, None) is None
        assert owned.labels["berth.installation"] == str(server.id)
        assert await port_holder(conn, 8091, names, server.id) is None  # its own port

    async def test_its_own_container_between_states_is_not_a_process_outside_docker(
        self, app: App, server: Server
    ) -> None:
        """A redeploy of an app whose container is not running (a crash loop) while the
        port answers: the port may be its own, so it is not refused; another app's
        port that answers the same way is."""
        runtime = app.gateway.runtime(server.id)
        conn = await app.gateway.connect(server)
        runtime.add("web", {"berth.installation": str(server.id)}, running=False)
        runtime.refused_ports.add(8091)
        assert await port_holder(conn, 8091, {}, server.id) is None
        assert await port_holder(conn, 8091, {}, None) == "a process on the server outside Docker"


class TestDeployChecksTheHostPort:
    async def test_a_port_held_by_a_container_is_a_409_naming_it(
        self, app: App, owner: User, server: Server
    ) -> None:
        """On an online server, a host port a container publishes is port-in-use at
        `port`, naming the container; nothing is written."""
        _online(app, server)
        app.gateway.runtime(server.id).add("legacy-api", host_port=8091)
        commits = app.store.commits
        with pytest.raises(Conflict) as caught:
            await app.bus.handle(_deploy(server), owner)
        assert (caught.value.kind, caught.value.field) == ("port-in-use", "port")
        assert "container 'legacy-api'" in caught.value.detail
        assert app.store.commits == commits

    async def test_another_installations_port_names_it(
        self, app: App, owner: User, server: Server
    ) -> None:
        """A port held by another installation's container names that installation."""
        _online(app, server)
        first = (await app.bus.handle(_deploy(server, "shop", 8080), owner)).installation
        labels = {"berth.installation": str(first.id)}
        app.gateway.runtime(server.id).add("blog-old", labels, host_port=8091)
        with pytest.raises(Conflict) as caught:
            await app.bus.handle(_deploy(server, "blog", 8091), owner)
        assert "the app 'shop'" in caught.value.detail

    async def test_a_redeploy_on_its_own_port_is_queued(
        self, app: App, owner: User, server: Server
    ) -> None:
        """The installation's own container on its port does not block its redeploy."""
        _online(app, server)
        first = (await app.bus.handle(_deploy(server), owner)).installation
        labels = {"berth.installation": str(first.id)}
        app.gateway.runtime(server.id).add("web", labels, host_port=8091)
        again = await app.bus.handle(_deploy(server, image="nginx:1.28"), owner)
        assert again.installation.id == first.id

    async def test_a_retry_with_its_idempotency_key_replays_without_a_check(
        self, app: App, owner: User, server: Server
    ) -> None:
        """A retried deploy (same Idempotency-Key) answers the first deployment even when
        the port is held now; a new key is refused at `port`."""
        _online(app, server)

        def keyed(key: str) -> object:
            return msgspec.structs.replace(_deploy(server), idempotency_key=key)

        first = await app.bus.handle(keyed("retry-1"), owner)
        app.gateway.runtime(server.id).refused_ports.add(8091)
        again = await app.bus.handle(keyed("retry-1"), owner)
        assert (again.deployment.id, again.replayed) == (first.deployment.id, True)
        with pytest.raises(Conflict) as caught:
            await app.bus.handle(keyed("retry-2"), owner)
        assert (caught.value.kind, caught.value.field) == ("port-in-use", "port")

    async def test_a_domain_app_or_an_offline_server_is_not_checked(
        self, app: App, owner: User, server: Server
    ) -> None:
        """A domain app publishes no host port; an offline server is not asked."""
        app.gateway.runtime(server.id).refused_ports.add(8091)
        await app.bus.handle(_deploy(server, "offline"), owner)  # server offline
        _online(app, server)
        await app.bus.handle(_deploy(server, "site", domain="shop.example.com"), owner)
        assert ("accepts", "8091") not in app.gateway.runtime(server.id).calls
