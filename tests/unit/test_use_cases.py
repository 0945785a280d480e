"""The use cases driven through in-memory fakes of every port."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any
from uuid import UUID, uuid4

import builders
import msgspec
import pytest
from berth.core import commands as c
from berth.core import tokens
from berth.core.commands import DeployCommand, parse_create_server, parse_deploy
from berth.core.errors import Conflict, InvalidInput, NotFound, Unauthorized, WriteConflict
from berth.core.models import (
    Container,
    ContainerPort,
    DeploymentState,
    InstallationStatus,
    Server,
    ServerStatus,
    Transport,
    User,
    WebhookEvent,
)
from berth.core.ports import CALL_LANE
from berth.core.results import CreatedServer
from berth.core.use_cases.accounts import TOUCH_EVERY
from berth.core.use_cases.servers import ENROLLMENT_TTL
from fakes import HOST_KEY, FakeDeploymentRepository, FakeInstallationRepository
from fakes.store import FakeServerRepository
from wiring import App, assert_hidden, build_app, finish, unique_email

MakeUser = Callable[[], Awaitable[User]]
MakeServer = Callable[[User], Awaitable[Server]]


def deploy_cmd(server: Server | UUID, key: str | None = None, **body: Any) -> DeployCommand:
    server_id = server.id if isinstance(server, Server) else server
    raw: dict[str, Any] = {"server_id": str(server_id), "name": "web", "image": "nginx:1.27"}
    raw.update(body)
    return parse_deploy(raw, idempotency_key=key)


class TestCreateUser:
    async def test_email_is_normalized(self, app: App) -> None:
        """The email is stored trimmed and lowercased."""
        email = unique_email("Ada")
        user = await app.bus.handle(
            c.CreateUser(email=f"  {email.upper()} ", password="long enough password")
        )
        assert user.email == email.lower()

    async def test_password_is_hashed(self, app: App) -> None:
        """Only a hash of the password is stored, and it verifies."""
        user = await app.bus.handle(
            c.CreateUser(email=unique_email(), password="long enough password")
        )
        assert "long enough password" not in user.password_hash
        assert app.hasher.verify(user.password_hash, "long enough password")

    async def test_duplicate_email_conflicts(self, app: App) -> None:
        """A second user with the same email, in any case, is a Conflict."""
        email = unique_email()
        await app.bus.handle(c.CreateUser(email=email, password="long enough password"))
        with pytest.raises(Conflict):
            await app.bus.handle(c.CreateUser(email=email.upper(), password="another password"))

    async def test_weak_password_and_bad_email_are_both_reported(self, app: App) -> None:
        """A short password and a malformed email give one InvalidInput with both errors."""
        with pytest.raises(InvalidInput) as info:
            await app.bus.handle(c.CreateUser(email="not-an-email", password="short"))
        assert sorted(e.location for e in info.value.errors) == ["email", "password"]
        assert all(e.value != "short" for e in info.value.errors)  # never echo a password
        assert app.store.commits == 0


class TestRegenerateToken:
    async def test_token_authenticates(self, app: App, owner: User) -> None:
        """A fresh token is well formed and authenticates its user."""
        token = await app.bus.handle(c.RegenerateToken(), owner)
        assert tokens.is_well_formed(token)
        assert (await app.bus.handle(c.Authenticate(token=token))).user.id == owner.id

    async def test_regenerating_revokes_the_old_token(self, app: App, owner: User) -> None:
        """After regenerating, the old token is refused at once."""
        old = await app.bus.handle(c.RegenerateToken(), owner)
        new = await app.bus.handle(c.ResetToken(email=owner.email.upper()))
        with pytest.raises(Unauthorized):
            await app.bus.handle(c.Authenticate(token=old))
        assert (await app.bus.handle(c.Authenticate(token=new))).user.id == owner.id

    async def test_only_hash_and_prefix_are_stored(self, app: App, owner: User) -> None:
        """The store keeps the token's hash and its display prefix, never the token."""
        token = await app.bus.handle(c.RegenerateToken(), owner)
        info = await app.bus.handle(c.TokenInfo(), owner)
        assert info is not None
        assert info.token_hash == tokens.hash_token(token)
        assert info.prefix == token[:10]
        assert token not in repr(info)

    async def test_unknown_email_is_not_found(self, app: App) -> None:
        """Regenerating for an unknown email is NotFound."""
        with pytest.raises(NotFound):
            await app.bus.handle(c.ResetToken(email=unique_email()))


class TestAuthenticate:
    @pytest.mark.parametrize(
        "token",
        ["", "Bearer x", "berth_", "berth_" + "a" * 49, tokens.generate()[:-1], "x" * 10_000],
        ids=["empty", "a-header", "the-prefix", "too-short", "cut", "huge"],  # the same in
    )  # every process that collects them
    async def test_malformed_or_unknown_is_unauthorized(self, app: App, token: str) -> None:
        """Malformed and unknown tokens are refused the same way."""
        with pytest.raises(Unauthorized) as info:
            await app.bus.handle(c.Authenticate(token=token))
        assert info.value.detail == Unauthorized().detail

    async def test_unknown_well_formed_token_is_unauthorized(self, app: App, owner: User) -> None:
        """A well-formed token nobody holds is refused with the same detail."""
        await app.bus.handle(c.RegenerateToken(), owner)
        with pytest.raises(Unauthorized) as info:
            await app.bus.handle(c.Authenticate(token=tokens.generate()))
        assert info.value.detail == Unauthorized().detail

    async def test_touch_is_throttled(self, app: App, owner: User) -> None:
        """Last use is recorded at most once per TOUCH_EVERY."""
        token = await app.bus.handle(c.RegenerateToken(), owner)
        first = app.clock.advance(1)
        await app.bus.handle(c.Authenticate(token=token))
        app.clock.advance(TOUCH_EVERY - timedelta(seconds=1))
        await app.bus.handle(c.Authenticate(token=token))
        info = await app.bus.handle(c.TokenInfo(), owner)
        assert info is not None
        assert info.last_used_at == first
        later = app.clock.advance(1)
        await app.bus.handle(c.Authenticate(token=token))
        info = await app.bus.handle(c.TokenInfo(), owner)
        assert info is not None
        assert info.last_used_at == later

    async def test_throttled_authentication_writes_nothing(self, app: App, owner: User) -> None:
        """Inside the throttle window, authenticating commits nothing."""
        token = await app.bus.handle(c.RegenerateToken(), owner)
        await app.bus.handle(c.Authenticate(token=token))
        commits = app.store.commits
        await app.bus.handle(c.Authenticate(token=token))
        assert app.store.commits == commits


class TestServers:
    async def test_created_server_is_pending_with_an_enrollment_token(
        self, app: App, owner: User
    ) -> None:
        """A new server is pending, owned by the caller, with a one-hour enrollment token."""
        created = await app.bus.handle(
            parse_create_server({"name": "box", "ssh_port": 2222}), owner
        )
        assert created.server.owner_id == owner.id
        assert created.server.status is ServerStatus.PENDING
        assert created.server.ssh_port == 2222
        assert created.server.enrollment_expires_at == app.clock.now() + ENROLLMENT_TTL
        assert tokens.is_well_formed(created.enrollment_token, tokens.ENROLL_PREFIX)
        stored = app.store.state.enrollment_hashes[created.server.id]
        assert stored == tokens.hash_token(created.enrollment_token)

    @pytest.mark.parametrize(
        "address", ["127.0.0.1", "::1", "169.254.169.254", "fe80::1", "0.0.0.0", "localhost"]
    )
    async def test_loopback_servers_are_refused_when_the_operator_says_so(
        self, address: str
    ) -> None:
        """Under BERTH_ALLOW_PRIVATE_TARGETS=0 a loopback or link-local address (or a name
        resolving to one) is InvalidInput at address, and nothing is stored."""
        strict = build_app(refuse_local_servers=True)
        strict.resolver.answers["localhost"] = ["127.0.0.1", "::1"]
        user = await strict.bus.handle(
            c.CreateUser(email=unique_email(), password="correct horse battery staple")
        )
        with pytest.raises(InvalidInput) as caught:
            await strict.bus.handle(parse_create_server({"name": "x", "address": address}), user)
        assert [e.location for e in caught.value.errors] == ["address"]
        assert "loopback" in caught.value.errors[0].message or "link-local" in str(caught.value)
        assert await strict.bus.handle(c.ListServers(), user) == []

    @pytest.mark.parametrize("address", ["192.168.1.20", "10.0.0.5", "fd00::5", "203.0.113.9"])
    async def test_lan_servers_are_allowed_even_then(self, address: str) -> None:
        """Private (RFC 1918) and unique-local server addresses stay allowed."""
        strict = build_app(refuse_local_servers=True)
        user = await strict.bus.handle(
            c.CreateUser(email=unique_email(), password="correct horse battery staple")
        )
        cmd = parse_create_server({"name": "lan", "address": address})
        assert (await strict.bus.handle(cmd, user)).server.address == address

    async def test_by_default_any_server_address_is_taken(self, app: App, owner: User) -> None:
        """Unset (the default), a loopback server address is accepted (tunnels, tests)."""
        cmd = parse_create_server({"name": "tunnel", "address": "127.0.0.1", "ssh_port": 2222})
        assert (await app.bus.handle(cmd, owner)).server.address == "127.0.0.1"
        assert app.resolver.asked == []

    async def test_list_is_scoped_to_the_owner(
        self, app: App, make_user: MakeUser, make_server: MakeServer
    ) -> None:
        """Each user lists exactly their own servers."""
        alice, bob = await make_user(), await make_user()
        a1, a2, b1 = await make_server(alice), await make_server(alice), await make_server(bob)
        assert {s.id for s in await app.bus.handle(c.ListServers(), alice)} == {a1.id, a2.id}
        assert [s.id for s in await app.bus.handle(c.ListServers(), bob)] == [b1.id]

    async def test_other_users_server_is_not_found(
        self, app: App, make_user: MakeUser, make_server: MakeServer
    ) -> None:
        """Another user's server is NotFound with the same detail as a random id."""
        alice, bob = await make_user(), await make_user()
        theirs = await make_server(bob)
        await assert_hidden(app, alice, lambda i: c.GetServer(server_id=i), theirs.id)

    async def test_past_the_users_limit_a_server_is_refused(self) -> None:
        """A user with ``max_servers`` servers gets ``server-limit`` and nothing is stored;
        another user still adds theirs, and deleting one makes room."""
        app = build_app(max_servers=2)

        async def create(user: User, name: str) -> CreatedServer:
            return await app.bus.handle(parse_create_server({"name": name}), user)

        password = "correct horse battery staple"
        alice = await app.bus.handle(c.CreateUser(email=unique_email(), password=password))
        bob = await app.bus.handle(c.CreateUser(email=unique_email(), password=password))
        first = await create(alice, "one")
        await create(alice, "two")
        with pytest.raises(Conflict) as refused:
            await create(alice, "three")
        assert refused.value.kind == "server-limit"
        assert refused.value.detail == (
            "You have 2 servers, the most one user may add (BERTH_SERVERS_PER_USER); "
            "delete one first."
        )
        assert len(await app.bus.handle(c.ListServers(), alice)) == 2
        await create(bob, "one")
        await app.bus.handle(c.DeleteServer(server_id=first.server.id), alice)
        await create(alice, "three")

    async def test_a_shared_team_has_its_own_limit(self) -> None:
        """The limit counts a team's servers: a shared team's are not its members'
        personal ones, and its refusal names the team."""
        app = build_app(max_servers=1)
        password = "correct horse battery staple"
        alice = await app.bus.handle(c.CreateUser(email=unique_email(), password=password))
        await app.bus.handle(parse_create_server({"name": "mine"}), alice)
        team = await app.bus.handle(c.CreateTeam(name="shared"), alice)
        there = await app.bus.handle(c.ActAs(team_id=team.id), alice)
        await app.bus.handle(parse_create_server({"name": "ours"}), there)
        with pytest.raises(Conflict) as refused:
            await app.bus.handle(parse_create_server({"name": "more"}), there)
        assert refused.value.detail == (
            "The team has 1 servers, the most one team may add (BERTH_SERVERS_PER_USER); "
            "delete one first."
        )


class TestDeploy:
    async def test_deploy_queues_a_deployment_and_an_installation(
        self, app: App, owner: User, server: Server
    ) -> None:
        """A first deploy creates an installation and a queued deployment."""
        result = await app.bus.handle(deploy_cmd(server, name="My Web", port=8080), owner)
        dep, inst = result.deployment, result.installation
        assert dep.state is DeploymentState.QUEUED
        assert dep.installation_id == inst.id
        assert inst.container_name == "my-web"
        assert inst.host_port == 8080
        assert inst.status is InstallationStatus.DEPLOYING
        assert inst.last_deployment is not None
        assert inst.last_deployment.id == dep.id
        assert [e.step for e in dep.events] == ["queued", "queued"]
        # The server is enrolled but not reached yet: the deployment says it waits for it.
        assert "offline" in dep.events[1].message
        assert "waits" in dep.events[1].message
        assert not result.replayed
        listed = (
            await app.bus.handle(c.ListInstallations(server_id=server.id), owner)
        ).installations
        assert [(i.id, i.status) for i in listed] == [(inst.id, InstallationStatus.DEPLOYING)]

    async def test_a_deployment_is_queued_in_the_queuing_lane(
        self, app: App, owner: User, server: Server, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Queuing a deployment writes in the ``queue`` lane (its write goes before the
        monitor's at SQLite's lock, behind the running deployments'), and the caller's
        lane is as it was afterwards."""
        lanes: list[str] = []
        lock = FakeServerRepository.lock

        async def lock_noting_the_lane(self: Any, *args: Any) -> Any:
            lanes.append(CALL_LANE.get())
            return await lock(self, *args)

        monkeypatch.setattr(FakeServerRepository, "lock", lock_noting_the_lane)
        await app.bus.handle(deploy_cmd(server, name="web", port=8080), owner)
        assert lanes == ["queue"]
        assert CALL_LANE.get() == "check"

    async def test_env_values_are_sealed_and_never_listed(
        self, app: App, owner: User, server: Server
    ) -> None:
        """Env values are stored sealed, delivered intact, and only keys are listed."""
        env = {"SECRET": "$(hunter2) `x` 'q' \"d\"\n🚀", "B": ""}
        result = await app.bus.handle(deploy_cmd(server, env=env), owner)
        sealed = app.store.env_sealed(result.installation.id)
        assert b"hunter2" not in sealed
        assert app.store.env_of(result.installation.id) == env
        assert app.store.deployment_env(result.deployment.id) == env
        assert result.installation.spec.env_keys == ("B", "SECRET")
        listed = (
            await app.bus.handle(c.ListInstallations(server_id=server.id), owner)
        ).installations
        assert "hunter2" not in msgspec.json.encode(listed).decode()

    async def test_redeploy_reuses_the_installation_and_cancels_the_queued_one(
        self, app: App, owner: User, server: Server
    ) -> None:
        """Redeploying a name keeps the installation, adds a deployment, cancels the queued one."""
        first = await app.bus.handle(deploy_cmd(server, image="nginx:1.26"), owner)
        app.clock.advance(1)
        second = await app.bus.handle(deploy_cmd(server, name="WEB", image="nginx:1.27"), owner)
        assert second.installation.id == first.installation.id
        assert second.deployment.id != first.deployment.id
        assert second.installation.spec.image == "nginx:1.27"
        assert second.installation.created_at == first.installation.created_at
        old = await app.bus.handle(c.GetDeployment(deployment_id=first.deployment.id), owner)
        assert old.state is DeploymentState.CANCELED
        assert old.finished_at is not None
        assert str(second.deployment.id) in (old.error or "")
        async with app.uow() as uow:
            active = await uow.deployments.active(owner.id, first.installation.id)
        assert [d.id for d in active] == [second.deployment.id]

    async def test_redeploy_while_running_conflicts_and_writes_nothing(
        self, app: App, owner: User, server: Server
    ) -> None:
        """A running deployment blocks a redeploy with Conflict; nothing changes."""
        first = await app.bus.handle(deploy_cmd(server), owner)
        app.store.mark_running(first.deployment.id, app.clock.advance(1))
        before, commits = app.store.state, app.store.commits
        with pytest.raises(Conflict, match="running"):
            await app.bus.handle(deploy_cmd(server, image="nginx:1.28"), owner)
        assert app.store.state is before
        assert app.store.commits == commits

    async def test_redeploy_after_finish_is_allowed(
        self, app: App, owner: User, server: Server
    ) -> None:
        """Once the deployment finished, the same name deploys again."""
        first = await app.bus.handle(deploy_cmd(server), owner)
        await finish(app, owner, first.deployment.id, DeploymentState.SUCCEEDED)
        listed = (
            await app.bus.handle(c.ListInstallations(server_id=server.id), owner)
        ).installations
        assert listed[0].status is InstallationStatus.RUNNING
        second = await app.bus.handle(deploy_cmd(server), owner)
        assert second.installation.id == first.installation.id
        assert (
            await app.bus.handle(c.GetDeployment(deployment_id=first.deployment.id), owner)
        ).state is DeploymentState.SUCCEEDED

    @pytest.mark.parametrize(
        ("state", "status"),
        [
            (DeploymentState.SUCCEEDED, InstallationStatus.RUNNING),
            (DeploymentState.FAILED, InstallationStatus.FAILED),
            (DeploymentState.TIMED_OUT, InstallationStatus.FAILED),
            (DeploymentState.CANCELED, InstallationStatus.PENDING),  # never deployed
        ],
    )
    async def test_status_follows_the_last_deployment(
        self,
        app: App,
        owner: User,
        server: Server,
        state: DeploymentState,
        status: InstallationStatus,
    ) -> None:
        """An installation's status and last deployment follow its latest deployment (its
        first, canceled: pending, as never deployed)."""
        result = await app.bus.handle(deploy_cmd(server), owner)
        await finish(app, owner, result.deployment.id, state)
        [inst] = (
            await app.bus.handle(c.ListInstallations(server_id=server.id), owner)
        ).installations
        assert inst.status is status
        assert inst.last_deployment is not None
        assert (inst.last_deployment.id, inst.last_deployment.state) == (
            result.deployment.id,
            state,
        )
        assert inst.last_deployment.finished_at == app.clock.now()

    async def test_domain_clash_conflicts_and_writes_nothing(
        self, app: App, owner: User, server: Server
    ) -> None:
        """A domain held by another installation on the server is a Conflict; nothing is written."""
        await app.bus.handle(deploy_cmd(server, name="one", domain="App.Example.com"), owner)
        before = app.store.state
        with pytest.raises(Conflict, match=r"app\.example\.com"):
            await app.bus.handle(deploy_cmd(server, name="two", domain="app.example.COM"), owner)
        assert app.store.state is before

    async def test_host_port_clash_conflicts(self, app: App, owner: User, server: Server) -> None:
        """Without a domain, a host port held by another installation is a Conflict."""
        await app.bus.handle(deploy_cmd(server, name="one", port=8080), owner)
        with pytest.raises(Conflict, match="8080"):
            await app.bus.handle(deploy_cmd(server, name="two", port=8080), owner)

    async def test_conflict_on_redeploy_keeps_the_queued_deployment(
        self, app: App, owner: User, server: Server
    ) -> None:
        """A redeploy refused for a clash does not cancel the queued deployment it would replace."""
        await app.bus.handle(deploy_cmd(server, name="one", port=8080), owner)
        two = await app.bus.handle(deploy_cmd(server, name="two", port=9090), owner)
        with pytest.raises(Conflict):
            await app.bus.handle(deploy_cmd(server, name="two", port=8080), owner)
        assert (
            await app.bus.handle(c.GetDeployment(deployment_id=two.deployment.id), owner)
        ).state is DeploymentState.QUEUED

    async def test_same_port_is_fine_with_a_domain(
        self, app: App, owner: User, server: Server
    ) -> None:
        """Apps behind a domain publish no host port, so they may share a container port."""
        await app.bus.handle(deploy_cmd(server, name="one", port=3000), owner)
        two = await app.bus.handle(
            deploy_cmd(server, name="two", port=3000, domain="two.example.com"), owner
        )
        three = await app.bus.handle(
            deploy_cmd(server, name="three", domain="three.example.com"), owner
        )
        assert two.installation.host_port is None
        assert three.installation.host_port is None

    async def test_same_port_and_domain_on_another_server(
        self, app: App, owner: User, server: Server, make_server: MakeServer
    ) -> None:
        """Domains and host ports are unique per server, not globally."""
        other = await make_server(owner)
        await app.bus.handle(deploy_cmd(server, port=8080), owner)
        await app.bus.handle(deploy_cmd(server, name="docs", domain="x.example.com"), owner)
        await app.bus.handle(deploy_cmd(other, port=8080), owner)
        await app.bus.handle(deploy_cmd(other, name="docs", domain="x.example.com"), owner)

    async def test_redeploy_may_keep_its_own_port_and_domain(
        self, app: App, owner: User, server: Server
    ) -> None:
        """An installation never clashes with itself."""
        await app.bus.handle(deploy_cmd(server, port=8080), owner)
        await app.bus.handle(deploy_cmd(server, port=8080), owner)
        await app.bus.handle(deploy_cmd(server, name="docs", domain="x.example.com"), owner)
        await app.bus.handle(deploy_cmd(server, name="docs", domain="x.example.com"), owner)

    async def test_other_users_server_is_not_found(
        self, app: App, make_user: MakeUser, make_server: MakeServer
    ) -> None:
        """Deploying to another user's server is NotFound, exactly like a random id."""
        alice, bob = await make_user(), await make_user()
        theirs = await make_server(bob)
        await assert_hidden(app, alice, deploy_cmd, theirs.id)
        assert (
            await app.bus.handle(c.ListInstallations(server_id=theirs.id), bob)
        ).installations == []

    async def test_idempotency_key_replays_the_same_deployment(
        self, app: App, owner: User, server: Server
    ) -> None:
        """A retried request with the same key and body returns the first deployment."""
        first = await app.bus.handle(deploy_cmd(server, key="k-1", env={"A": "1"}), owner)
        app.clock.advance(5)
        commits = app.store.commits
        again = await app.bus.handle(deploy_cmd(server, key="k-1", env={"A": "1"}), owner)
        assert again.replayed
        assert again.deployment.id == first.deployment.id
        assert again.installation.id == first.installation.id
        assert app.store.commits == commits
        assert len(app.store.state.deployments) == 1

    @pytest.mark.parametrize(
        "change",
        [{"image": "nginx:1.28"}, {"env": {"A": "2"}}, {"port": 8081}, {"name": "other"}],
    )
    async def test_same_key_different_body_conflicts(
        self, app: App, owner: User, server: Server, change: dict[str, Any]
    ) -> None:
        """Reusing a key with a different body (env values included) is a Conflict."""
        await app.bus.handle(deploy_cmd(server, key="k-2", env={"A": "1"}), owner)
        body = {"env": {"A": "1"}} | change
        with pytest.raises(Conflict, match="Idempotency-Key"):
            await app.bus.handle(deploy_cmd(server, key="k-2", **body), owner)

    async def test_idempotency_keys_are_per_user(
        self, app: App, make_user: MakeUser, make_server: MakeServer
    ) -> None:
        """Two users may use the same key independently."""
        alice, bob = await make_user(), await make_user()
        a = await app.bus.handle(deploy_cmd(await make_server(alice), key="same"), alice)
        b = await app.bus.handle(deploy_cmd(await make_server(bob), key="same"), bob)
        assert a.deployment.id != b.deployment.id
        assert not b.replayed

    async def test_replay_survives_a_later_redeploy(
        self, app: App, owner: User, server: Server
    ) -> None:
        """A retry after a newer deployment still returns the original deployment."""
        first = await app.bus.handle(deploy_cmd(server, key="k-3"), owner)
        await app.bus.handle(deploy_cmd(server, image="nginx:1.28"), owner)
        again = await app.bus.handle(deploy_cmd(server, key="k-3"), owner)
        assert again.replayed
        assert again.deployment.id == first.deployment.id
        assert again.deployment.state is DeploymentState.CANCELED

    async def test_a_deployment_claimed_meanwhile_is_decided_again(
        self, app: App, owner: User, server: Server, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The worker claims the queued deployment between a redeploy's reads and its
        writes (the store refuses to cancel it): the redeploy runs again on fresh reads and
        answers the real conflict, a running deployment."""
        first = await app.bus.handle(deploy_cmd(server), owner)
        original = FakeDeploymentRepository.finish
        calls = 0

        async def claimed_meanwhile(
            repo: FakeDeploymentRepository,
            owner_id: UUID,
            deployment_id: UUID,
            *args: Any,
            **kwargs: Any,
        ) -> None:
            nonlocal calls
            calls += 1
            assert kwargs == {"queued_only": True}  # never cancels a running one
            if calls == 1:  # what the SQL store answers when a claim committed first
                app.store.mark_running(deployment_id, app.clock.now())
                raise WriteConflict("This deployment is running.")
            await original(repo, owner_id, deployment_id, *args, **kwargs)

        monkeypatch.setattr(FakeDeploymentRepository, "finish", claimed_meanwhile)
        before = app.store.state
        with pytest.raises(Conflict, match="running") as refused:
            await app.bus.handle(deploy_cmd(server, image="nginx:1.28"), owner)
        assert not isinstance(refused.value, WriteConflict)
        assert calls == 1
        assert app.store.state is before  # the first attempt was rolled back
        running = await app.bus.handle(c.GetDeployment(deployment_id=first.deployment.id), owner)
        assert running.state is DeploymentState.RUNNING

    async def test_a_write_conflict_is_retried_once_only(
        self, app: App, owner: User, server: Server, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A store that refuses the write again on the retry: that Conflict is the answer."""
        calls = 0

        async def always_taken(*_args: Any) -> None:
            nonlocal calls
            calls += 1
            raise WriteConflict("Host port 3000 is already used by another installation.")

        monkeypatch.setattr(FakeInstallationRepository, "save", always_taken)
        before = app.store.state
        with pytest.raises(Conflict, match="Host port 3000"):
            await app.bus.handle(deploy_cmd(server), owner)
        assert calls == 2
        assert app.store.state is before


class TestHostPaths:
    """What a deploy may mount (issue 21, finding 2): ``check_volume``'s rules everywhere,
    and on the server that is this machine nothing of berth's own."""

    DATA = "/srv/berth/data"
    REFUSED = (f"{DATA}:/d", f"{DATA}/secret.key:/k:ro", "/srv/berth:/b", "//srv/./:/s")

    async def local(self, app: App) -> tuple[User, Server]:
        """The first account, and this machine's server (``serve --local`` gave it them)."""
        password = "correct horse battery staple"
        owner = await app.bus.handle(c.CreateUser(email=unique_email(), password=password))
        [server] = await app.bus.handle(c.ListServers(), owner)
        assert server.transport is Transport.LOCAL
        return owner, server

    async def test_berths_data_dir_is_refused_on_this_machines_server(self) -> None:
        """The data dir, what lies in it and every directory holding it: a 422 at each
        volume, saying why; nothing is written."""
        app = build_app(berth_paths=(self.DATA,), local_managed=True)
        owner, server = await self.local(app)
        commits = app.store.commits
        with pytest.raises(InvalidInput) as refused:
            await app.bus.handle(deploy_cmd(server, volumes=[*self.REFUSED, "/srv/ok:/ok"]), owner)
        assert [e.location for e in refused.value.errors] == [
            f"volumes[{i}]" for i in range(len(self.REFUSED))
        ]
        assert all("berth's own data" in e.message for e in refused.value.errors)
        assert app.store.commits == commits
        assert app.store.state.deployments == {}

    async def test_the_same_paths_are_the_users_own_on_another_server(
        self, owner: User, server: Server
    ) -> None:
        """On a server that is not this machine the data dir's path means nothing."""
        app = build_app(berth_paths=(self.DATA,), local_managed=True)
        owner, _ = await self.local(app)
        cmd = parse_create_server(
            {"name": "web-1", "address": "203.0.113.7", "host_keys": [HOST_KEY]}
        )
        other = (await app.bus.handle(cmd, owner)).server
        result = await app.bus.handle(deploy_cmd(other, volumes=list(self.REFUSED)), owner)
        assert result.deployment.spec.volumes == self.REFUSED

    async def test_a_relative_path_is_placed_before_it_is_checked(self) -> None:
        """Relative host paths live under /var/lib/berth/apps/<app>: refused when berth's
        data dir is there."""
        app = build_app(berth_paths=("/var/lib/berth/apps/web/state",), local_managed=True)
        owner, server = await self.local(app)
        with pytest.raises(InvalidInput) as refused:
            await app.bus.handle(deploy_cmd(server, volumes=["state:/s", "logs:/l"]), owner)
        assert [e.location for e in refused.value.errors] == ["volumes[0]"]

    async def test_rollback_to_a_revision_with_a_path_refused_since_is_a_conflict(
        self, app: App, owner: User, server: Server
    ) -> None:
        """A revision stored before a rule (it mounts ``/etc``) is not deployed again: a
        409 naming the revision and the volume, and nothing is written."""
        first = await app.bus.handle(deploy_cmd(server, volumes=["/srv/etc:/host-etc"]), owner)
        await finish(app, owner, first.deployment.id)
        second = await app.bus.handle(deploy_cmd(server), owner)
        await finish(app, owner, second.deployment.id)
        row = app.store.state.deployments[first.deployment.id]
        spec = msgspec.structs.replace(row.deployment.spec, volumes=("/etc:/host-etc",))
        app.store.state.deployments[first.deployment.id] = dataclasses.replace(
            row, deployment=msgspec.structs.replace(row.deployment, spec=spec)
        )
        before = dict(app.store.state.deployments)
        rollback = c.Rollback(
            installation_id=first.installation.id, deployment_id=first.deployment.id
        )
        with pytest.raises(Conflict) as refused:
            await app.bus.handle(rollback, owner)
        assert refused.value.kind == "revision-unavailable"
        assert str(first.deployment.id) in refused.value.detail
        assert "'/etc:/host-etc'" in refused.value.detail
        assert app.store.state.deployments == before


class TestReadsAreOwnerScoped:
    @pytest.mark.parametrize(
        ("read", "of"),
        [
            (lambda i: c.ListInstallations(server_id=i), "server"),
            (lambda i: c.ListContainers(server_id=i), "server"),
            (lambda i: c.GetDeployment(deployment_id=i), "deployment"),
            (lambda i: c.GetInstallation(installation_id=i), "installation"),
        ],
        ids=["installations", "containers", "deployment", "installation"],
    )
    async def test_another_users_things_are_not_found(
        self, app: App, make_user: MakeUser, make_server: MakeServer, read: Any, of: str
    ) -> None:
        """Reading another user's server's lists, deployment or installation is NotFound,
        like a random id, and contacts no server; their owner reads them."""
        alice, bob = await make_user(), await make_user()
        theirs = await make_server(bob)
        deployed = await app.bus.handle(deploy_cmd(theirs), bob)
        ids = {
            "server": theirs.id,
            "deployment": deployed.deployment.id,
            "installation": deployed.installation.id,
        }
        await assert_hidden(app, alice, read, ids[of])
        assert app.gateway.calls == []
        await app.bus.handle(read(ids[of]), bob)  # raises nothing for the owner

    async def test_installations_of_one_server_only(
        self, app: App, owner: User, server: Server, make_server: MakeServer
    ) -> None:
        """An installation list holds the server's installations, oldest first."""
        other = await make_server(owner)
        a = await app.bus.handle(deploy_cmd(server, name="alpha", port=1001), owner)
        app.clock.advance(1)
        b = await app.bus.handle(deploy_cmd(server, name="beta", port=1002), owner)
        await app.bus.handle(deploy_cmd(other, name="gamma", port=1003), owner)
        listed = await app.bus.handle(c.ListInstallations(server_id=server.id), owner)
        assert listed.server.id == server.id
        assert [i.id for i in listed.installations] == [a.installation.id, b.installation.id]


class TestListContainers:
    async def _online(self, app: App, server: Server) -> Server:
        online = msgspec.structs.replace(server, status=ServerStatus.ONLINE)
        app.store.state.servers[server.id] = online
        return online

    def _container(self, name: str) -> Container:
        return builders.a_container(
            id=uuid4().hex,
            name=name,
            image="nginx:1.27",
            status="Up 2 minutes",
            created_at=None,
            ports=(
                ContainerPort(container_port=80, host_ip="0.0.0.0", host_port=8080, protocol="tcp"),
            ),
        )

    async def test_live_list_is_saved_as_snapshot(
        self, app: App, owner: User, server: Server
    ) -> None:
        """A reachable server answers live; the answer becomes the snapshot."""
        await self._online(app, server)
        app.gateway.containers[server.id] = [self._container("web")]
        live = await app.bus.handle(c.ListContainers(server_id=server.id), owner)
        assert live.server_status is ServerStatus.ONLINE
        assert [c.name for c in live.containers] == ["web"]
        assert live.observed_at == app.clock.now()
        observed = app.clock.now()
        del app.gateway.containers[server.id]
        app.clock.advance(60)
        cached = await app.bus.handle(c.ListContainers(server_id=server.id), owner)
        assert cached.server_status is ServerStatus.OFFLINE
        assert [c.name for c in cached.containers] == ["web"]
        assert cached.observed_at == observed

    async def test_another_berths_containers_are_nobodys(
        self, app: App, owner: User, server: Server
    ) -> None:
        """On an Engine shared with another berth (issue 28), a container labelled with an
        installation this berth never made on this server is listed as nobody's; this
        server's own keep theirs, live and from the snapshot."""
        await self._online(app, server)
        ours = await app.bus.handle(deploy_cmd(server, name="alpha", port=1001), owner)
        mine = msgspec.structs.replace(
            self._container("alpha"), installation_id=ours.installation.id
        )
        foreign = msgspec.structs.replace(self._container("theirs"), installation_id=uuid4())
        app.gateway.containers[server.id] = [mine, foreign]
        live = await app.bus.handle(c.ListContainers(server_id=server.id), owner)
        assert [(x.name, x.installation_id) for x in live.containers] == [
            ("alpha", ours.installation.id),
            ("theirs", None),
        ]
        del app.gateway.containers[server.id]
        cached = await app.bus.handle(c.ListContainers(server_id=server.id), owner)
        assert [x.installation_id for x in cached.containers] == [ours.installation.id, None]


class TestWordsForPeople:
    async def test_a_clash_names_the_app_not_an_installation(
        self, app: App, owner: User, server: Server
    ) -> None:
        """A host port or domain held by another app names it as the dashboard does: "the
        app 'alpha'", and says to remove that app (issue 28)."""
        await app.bus.handle(deploy_cmd(server, name="alpha", port=1001), owner)
        await app.bus.handle(deploy_cmd(server, name="shop", domain="shop.example.com"), owner)
        with pytest.raises(Conflict) as port:
            await app.bus.handle(deploy_cmd(server, name="beta", port=1001), owner)
        with pytest.raises(Conflict) as domain:
            await app.bus.handle(deploy_cmd(server, name="gamma", domain="shop.example.com"), owner)
        assert "already used by the app 'alpha'" in port.value.detail
        assert "the app 'shop'" in domain.value.detail
        assert "remove that app" in domain.value.detail
        for caught in (port, domain):
            assert "installation" not in caught.value.detail


class TestPendingServerReads:
    @pytest.mark.parametrize("read", [c.ListContainers, c.GetServerDiskUsage])
    async def test_a_pending_servers_reads_are_server_pending(
        self, app: App, owner: User, pending_server: Server, read: Any
    ) -> None:
        """The containers and Docker's disk usage of a server that never enrolled are a 409
        ``server-pending``; the server is not contacted."""
        with pytest.raises(Conflict) as caught:
            await app.bus.handle(read(server_id=pending_server.id), owner)
        assert caught.value.kind == "server-pending"
        assert app.gateway.calls == []

    async def test_installation_reads_on_a_pending_server_are_server_pending(
        self, app: App, owner: User, server: Server
    ) -> None:
        """Logs and stats of an app whose server went back to pending are 409s, not 503s."""
        deployed = await app.bus.handle(deploy_cmd(server, name="web", port=1001), owner)
        app.store.state.servers[server.id] = msgspec.structs.replace(
            server, status=ServerStatus.PENDING
        )
        installation_id = deployed.installation.id
        for cmd in (
            c.InstallationLogs(installation_id=installation_id),
            c.GetInstallationStats(installation_id=installation_id),
        ):
            with pytest.raises(Conflict) as caught:
                await app.bus.handle(cmd, owner)
            assert caught.value.kind == "server-pending"
        assert app.gateway.calls == []


class TestOwnedKinds:
    """The small list/forget use cases name their repository; a wrong name fails at import."""

    def test_a_repository_the_unit_of_work_lacks_is_refused_at_class_creation(self) -> None:
        from berth.core.use_cases.owned import ForgetOwned, ListOwned

        with pytest.raises(TypeError, match="no repository 'servrs'"):

            class ListTypo(ListOwned[int], repository="servrs"):
                pass

        with pytest.raises(TypeError, match="no repository 'hooks'"):

            class ForgetTypo(ForgetOwned, repository="hooks", noun="hook", event="hook_gone"):
                pass

    async def test_forgetting_another_owners_thing_is_not_found_and_keeps_it(
        self, app: App
    ) -> None:
        owner = await app.bus.handle(
            c.CreateUser(email=unique_email(), password="long enough password")
        )
        other = await app.bus.handle(
            c.CreateUser(email=unique_email(), password="long enough password")
        )
        failed = (WebhookEvent.DEPLOYMENT_FAILED,)
        hook = c.CreateWebhook(url="https://hooks.example/in", events=failed)
        created = await app.bus.handle(hook, owner)
        with pytest.raises(NotFound, match=r"^Webhook not found\.$"):
            await app.bus.handle(c.DeleteWebhook(webhook_id=created.webhook.id), other)
        assert [w.id for w in await app.bus.handle(c.ListWebhooks(), owner)] == [created.webhook.id]
        await app.bus.handle(c.DeleteWebhook(webhook_id=created.webhook.id), owner)
        assert await app.bus.handle(c.ListWebhooks(), owner) == []
