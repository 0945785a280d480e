"""Push to deploy and Git credentials in the core: the signature of a forge's delivery,
the push event's fields, the deploy hook's use cases and a push's deploy through the bus
(over the fakes), and the team's Git credentials."""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Awaitable, Callable
from typing import Any
from uuid import UUID, uuid4

import pytest
from berth.core import commands as c
from berth.core.errors import BadSignature, Conflict, InvalidInput, NotFound
from berth.core.models import DeploymentState, Server, User
from berth.core.pushes import branch_of, parse_push, sign, signed
from berth.core.results import CreatedDeployHook, PushOutcome
from berth.core.types import RuleError, check_git_host
from hypothesis import given
from hypothesis import strategies as st
from wiring import App, build_app, finish

SHA1, SHA2, SHA3 = "1" * 40, "2" * 40, "3" * 40
secrets_ = st.text(min_size=1, max_size=64)
bodies = st.binary(max_size=512)


def github(secret: str, body: bytes) -> dict[str, str]:
    digest = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return {"x-github-event": "push", "x-hub-signature-256": f"sha256={digest}"}


def gitea(secret: str, body: bytes) -> dict[str, str]:
    digest = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return {"x-gitea-event": "push", "x-gitea-signature": digest}


class TestSignature:
    """``signed``: HMAC-SHA256 of the raw body with the hook's secret, as forges send it."""

    @given(secrets_, bodies)
    def test_github_and_gitea_signatures_are_accepted(self, secret: str, body: bytes) -> None:
        """Either header, made with the secret over the body, is accepted (any hex case)."""
        assert signed(secret, body, github(secret, body))
        assert signed(secret, body, gitea(secret, body))
        upper = {"x-gitea-signature": sign(secret, body).upper()}
        assert signed(secret, body, upper)

    @given(secrets_, bodies, st.binary(min_size=1, max_size=8))
    def test_another_body_or_secret_is_refused(self, secret: str, body: bytes, more: bytes) -> None:
        """A signature of another body, or with another secret, is refused."""
        assert not signed(secret, body + more, github(secret, body))
        assert not signed(secret + "x", body, gitea(secret, body))

    @given(secrets_, bodies, st.text(max_size=80))
    def test_missing_or_garbled_signatures_are_refused(
        self, secret: str, body: bytes, junk: str
    ) -> None:
        """No signature header, or any text in one, is refused without an error."""
        assert not signed(secret, body, {"x-github-event": "push"})
        assert not signed(secret, body, {"x-hub-signature-256": junk})
        assert not signed(secret, body, {"x-gitea-signature": junk})

    def test_github_needs_its_prefix(self) -> None:
        """X-Hub-Signature-256 without ``sha256=`` is refused."""
        assert not signed("s", b"{}", {"x-hub-signature-256": sign("s", b"{}")})


class TestPushEvent:
    """``parse_push`` and ``branch_of``: the fields berth reads of a push event."""

    def test_a_push_names_its_ref_commit_and_default_branch(self) -> None:
        """``ref``, ``after`` (lowercased) and ``repository.default_branch``."""
        body = {"ref": "refs/heads/main", "after": "A" * 40, "repository": {"default_branch": "x"}}
        push = parse_push(json.dumps(body).encode())
        assert (push.ref, push.after, push.default_branch) == ("refs/heads/main", "a" * 40, "x")

    def test_a_deleted_branch_has_no_commit(self) -> None:
        """An ``after`` of zeros (or ``deleted``) is no commit to deploy."""
        body = {"ref": "refs/heads/main", "after": "0" * 40, "deleted": True}
        assert parse_push(json.dumps(body).encode()).after is None

    @pytest.mark.parametrize(
        ("body", "fields"),
        [
            (b"not json", ["body"]),
            (b"[1]", ["body"]),
            (b'{"ref": "main", "after": "xyz"}', ["ref", "after"]),
        ],
    )
    def test_a_body_that_is_no_push_names_its_fields(self, body: bytes, fields: list[str]) -> None:
        """Each missing or malformed field is named."""
        with pytest.raises(InvalidInput) as exc:
            parse_push(body)
        assert [e.location for e in exc.value.errors] == fields

    @pytest.mark.parametrize(
        ("ref", "branch"),
        [("refs/heads/main", "main"), ("refs/heads/a/b", "a/b"), ("refs/tags/v1", None)],
    )
    def test_the_branch_of_a_ref(self, ref: str, branch: str | None) -> None:
        """A branch's ref names it; a tag's names none."""
        assert branch_of(ref) == branch


# -- the hook through the bus ------------------------------------------------------------------


@pytest.fixture
def app() -> App:
    return build_app(allow_private=True)


async def deploy_git(app: App, owner: User, server: Server, ref: str | None = "main") -> UUID:
    """A deploy of ``app`` from Git, succeeded; its installation's id."""
    git: dict[str, Any] = {"url": "https://git.example.com/acme/app.git"}
    if ref is not None:
        git["ref"] = ref
    raw = {"server_id": str(server.id), "name": "app", "port": 3000, "build": {"git": git}}
    raw["env"] = {"TOKEN": "a-secret-value"}
    result = await app.bus.handle(c.parse_deploy(raw), owner)
    await finish(app, owner, result.deployment.id)
    return result.installation.id


async def hook_of(app: App, owner: User, installation_id: UUID) -> CreatedDeployHook:
    """``CreateDeployHook`` for ``installation_id``, as ``owner``."""
    return await app.bus.handle(c.CreateDeployHook(installation_id=installation_id), owner)


Hooked = tuple[UUID, CreatedDeployHook]


@pytest.fixture
async def hooked(app: App, owner: User, server: Server) -> Hooked:
    """A Git app of ``owner``'s on its branch ``main`` (``deploy_git``) with its deploy hook:
    the installation's id and what ``CreateDeployHook`` answered."""
    installation_id = await deploy_git(app, owner, server)
    return installation_id, await hook_of(app, owner, installation_id)


def body_of(ref: str, after: str) -> bytes:
    return json.dumps(
        {"ref": ref, "after": after, "repository": {"default_branch": "main"}}
    ).encode()


async def deliver(
    app: App, hook_id: UUID, secret: str, after: str, ref: str = "refs/heads/main"
) -> PushOutcome:
    body = body_of(ref, after)
    return await app.bus.handle(
        c.ReceivePush(hook_id=hook_id, body=body, headers=github(secret, body)), None
    )


class TestDeployHook:
    """``CreateDeployHook``, ``GetDeployHook``, ``RemoveDeployHook`` and a delivery's
    ``ReceivePush`` → ``DeployPush``, through the bus."""

    async def test_a_signed_push_deploys_the_pushed_commit(
        self, app: App, owner: User, hooked: Hooked
    ) -> None:
        """The deployment builds the pushed commit from the app's branch, with its env, a
        new image tag, and the app's spec otherwise; the hook's deploy is audited."""
        _, created = hooked
        assert created.secret.startswith("berth_hook_")
        outcome = await deliver(app, created.hook.id, created.secret, SHA1)
        deployment = outcome.deployment
        assert deployment is not None
        assert deployment.commit == SHA1
        assert deployment.state is DeploymentState.QUEUED
        assert deployment.spec.build is not None
        assert deployment.spec.build.git is not None
        assert deployment.spec.build.git.ref == "main"
        assert deployment.spec.image.endswith(deployment.id.hex[:12])
        async with app.uow() as uow:
            assert await uow.deployments.env(owner.id, deployment.id) == {"TOKEN": "a-secret-value"}
            entries = await uow.audit.page(owner.id, 50)
        pushed = [e for e in entries if e.action == "deploy" and SHA1 in (e.detail or "")]
        assert [e.actor.token_name for e in pushed] == ["deploy hook"]

    async def test_a_bad_signature_deploys_nothing(self, app: App, hooked: Hooked) -> None:
        """A delivery signed with another secret is ``BadSignature``; nothing is queued."""
        _, created = hooked
        before = len(app.store.state.deployments)
        with pytest.raises(BadSignature):
            await deliver(app, created.hook.id, "berth_hook_wrong", SHA1)
        assert len(app.store.state.deployments) == before

    async def test_another_branch_a_tag_or_a_ping_is_ignored(
        self, app: App, hooked: Hooked
    ) -> None:
        """Only a push to the app's branch deploys; the rest is ignored, nothing queued."""
        _, created = hooked
        before = len(app.store.state.deployments)
        for ref in ("refs/heads/feature", "refs/tags/v1"):
            outcome = await deliver(app, created.hook.id, created.secret, SHA1, ref)
            assert outcome.deployment is None
            assert ref in outcome.detail
        body = b'{"zen": "hi"}'
        ping = github(created.secret, body) | {"x-github-event": "ping"}
        outcome = await app.bus.handle(
            c.ReceivePush(hook_id=created.hook.id, body=body, headers=ping), None
        )
        assert outcome.deployment is None
        assert len(app.store.state.deployments) == before

    async def test_the_default_branch_is_the_repositorys(
        self, app: App, owner: User, server: Server
    ) -> None:
        """An app built from the default branch deploys pushes to the branch the event
        names as the repository's default."""
        installation_id = await deploy_git(app, owner, server, ref=None)
        created = await hook_of(app, owner, installation_id)
        assert (await deliver(app, created.hook.id, created.secret, SHA1)).deployment is not None

    async def test_a_burst_leaves_the_newest_queued_behind_a_running_one(
        self, app: App, hooked: Hooked
    ) -> None:
        """While one deployment runs, pushes queue behind it (no 409); each supersedes the
        one queued before, so only the newest commit is left to deploy."""
        hook, secret = hooked[1].hook.id, hooked[1].secret
        running = (await deliver(app, hook, secret, SHA1)).deployment
        assert running is not None
        app.store.mark_running(running.id, app.clock.advance(1), step="build")
        middle = (await deliver(app, hook, secret, SHA2)).deployment
        newest = (await deliver(app, hook, secret, SHA3)).deployment
        assert middle is not None
        assert newest is not None
        states = {
            d: app.store.state.deployments[d].deployment.state
            for d in (running.id, middle.id, newest.id)
        }
        assert states == {
            running.id: DeploymentState.RUNNING,
            middle.id: DeploymentState.CANCELED,
            newest.id: DeploymentState.QUEUED,
        }

    async def test_a_new_post_rotates_the_secret_and_keeps_the_url(
        self, app: App, owner: User, hooked: Hooked
    ) -> None:
        """The hook keeps its id; the old secret no longer signs; GET shows the hook."""
        installation_id, first = hooked
        second = await hook_of(app, owner, installation_id)
        assert second.hook.id == first.hook.id
        assert second.secret != first.secret
        with pytest.raises(BadSignature):
            await deliver(app, first.hook.id, first.secret, SHA1)
        shown = await app.bus.handle(c.GetDeployHook(installation_id=installation_id), owner)
        assert shown == first.hook
        [(_, sealed)] = app.store.state.deploy_hooks.values()
        assert second.secret.encode() not in sealed

    async def test_a_removed_hook_is_not_found(self, app: App, owner: User, hooked: Hooked) -> None:
        """After ``RemoveDeployHook`` its URL is a 404, as is a second removal."""
        installation_id, created = hooked
        await app.bus.handle(c.RemoveDeployHook(installation_id=installation_id), owner)
        with pytest.raises(NotFound):
            await deliver(app, created.hook.id, created.secret, SHA1)
        with pytest.raises(NotFound):
            await app.bus.handle(c.RemoveDeployHook(installation_id=installation_id), owner)

    async def test_an_app_from_an_image_gets_no_hook(
        self, app: App, owner: User, server: Server
    ) -> None:
        """``not-built-from-git``: a push has nothing to build."""
        raw = {"server_id": str(server.id), "name": "img", "image": "nginx:1", "port": 80}
        result = await app.bus.handle(c.parse_deploy(raw), owner)
        cmd = c.CreateDeployHook(installation_id=result.installation.id)
        with pytest.raises(Conflict) as exc:
            await app.bus.handle(cmd, owner)
        assert exc.value.kind == "not-built-from-git"

    async def test_another_teams_installation_is_not_found(
        self,
        app: App,
        owner: User,
        server: Server,
        make_user: Callable[[], Awaitable[User]],
    ) -> None:
        """Another user can neither make, read nor remove the hook of one's installation."""
        installation_id = await deploy_git(app, owner, server)
        await hook_of(app, owner, installation_id)
        other = await make_user()
        for cmd in (
            c.CreateDeployHook(installation_id=installation_id),
            c.GetDeployHook(installation_id=installation_id),
            c.RemoveDeployHook(installation_id=installation_id),
        ):
            with pytest.raises(NotFound):
                await app.bus.handle(cmd, other)  # type: ignore[arg-type]

    async def test_an_unknown_hook_is_not_found(self, app: App) -> None:
        """A delivery to an id that names no hook is a 404, whatever its signature."""
        with pytest.raises(NotFound):
            await deliver(app, uuid4(), "berth_hook_x", SHA1)


# -- the Git host rule ---------------------------------------------------------------------


class TestGitHostRule:
    """``check_git_host`` (the use cases of both kinds of saved credentials:
    ``test_host_credentials``)."""

    @pytest.mark.parametrize("host", ["github.com", "127.0.0.1:8080", "gitea"])
    def test_git_hosts(self, host: str) -> None:
        """Any hostname (a bare one too: Git has no Docker Hub rule) with an optional port."""
        assert check_git_host(host.upper()) == host

    @pytest.mark.parametrize("host", ["x.io:0", "x/y", "", "a b"])
    def test_bad_git_hosts(self, host: str) -> None:
        with pytest.raises(RuleError):
            check_git_host(host)
