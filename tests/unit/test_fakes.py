"""The fakes keep the promises of the ports they stand in for (transactions, uniqueness)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import builders
import pytest
from berth.core.errors import Conflict, NotFound
from berth.core.models import (
    Deployment,
    DeploymentEvent,
    DeploymentState,
    Installation,
    Server,
    ServerStatus,
    User,
)
from fakes import FakeBox, FakeClock, FakeHasher, FakeUnitOfWorkFactory

NOW = datetime(2025, 1, 1, tzinfo=UTC)


def user(email: str | None = None) -> User:
    return builders.a_user(**({"email": email} if email else {}), created_at=NOW)


def server(owner: User) -> Server:
    return builders.a_server(
        owner_id=owner.id, name="s", address=None, status=ServerStatus.PENDING, created_at=NOW
    )


def installation(
    srv: Server, name: str, *, domain: str | None = None, host_port: int | None = None
) -> Installation:
    spec = builders.a_spec(image="a:1", port=80, domain=domain)
    return builders.an_installation(
        srv, name=name, spec=spec, host_port=host_port, created_at=NOW, updated_at=NOW
    )


def deployment(inst: Installation) -> Deployment:
    return builders.a_deployment(inst, created_at=NOW)


async def seeded(uow: FakeUnitOfWorkFactory) -> tuple[User, Server]:
    owner = user()
    srv = server(owner)
    async with uow() as tx:
        await tx.users.add(owner)
        await tx.servers.add(srv, None)
        await tx.commit()
    return owner, srv


class TestFakeUnitOfWork:
    async def test_nothing_is_written_without_commit(self) -> None:
        """Leaving a unit of work without committing discards its writes."""
        uow = FakeUnitOfWorkFactory()
        u = user()
        async with uow() as tx:
            await tx.users.add(u)
            assert await tx.users.get(u.id) == u  # visible inside
        async with uow() as tx:
            assert await tx.users.get(u.id) is None

    async def test_an_exception_rolls_back(self) -> None:
        """An exception inside the block discards uncommitted writes."""
        uow = FakeUnitOfWorkFactory()
        u = user()
        tx = uow()
        await tx.__aenter__()
        await tx.users.add(u)
        await tx.__aexit__(RuntimeError, RuntimeError("boom"), None)
        async with uow() as tx:
            assert await tx.users.get(u.id) is None

    async def test_commit_publishes(self) -> None:
        """Committed writes are seen by later units of work."""
        uow = FakeUnitOfWorkFactory()
        owner, srv = await seeded(uow)
        async with uow() as tx:
            assert await tx.servers.get(owner.id, srv.id) == srv


class TestFakeRepositories:
    async def test_email_is_unique_in_any_case(self) -> None:
        """A second user with the same email, whatever its case, is a Conflict."""
        uow = FakeUnitOfWorkFactory()
        async with uow() as tx:
            await tx.users.add(user("Ada@example.com"))
            with pytest.raises(Conflict):
                await tx.users.add(user("ada@EXAMPLE.com"))

    @pytest.mark.parametrize(
        ("first", "second"),
        [
            ({"name": "web"}, {"name": "web"}),
            ({"name": "a1", "domain": "x.example.com"}, {"name": "b1", "domain": "x.example.com"}),
            ({"name": "a1", "host_port": 80}, {"name": "b1", "host_port": 80}),
        ],
    )
    async def test_installation_uniqueness_per_server(
        self, first: dict[str, object], second: dict[str, object]
    ) -> None:
        """Container name, domain and host port are unique per server (Conflict)."""
        uow = FakeUnitOfWorkFactory()
        owner, srv = await seeded(uow)
        async with uow() as tx:
            await tx.installations.save(owner.id, installation(srv, **first), {})
            with pytest.raises(Conflict):
                await tx.installations.save(owner.id, installation(srv, **second), {})

    async def test_uniqueness_is_per_server(self) -> None:
        """The same name, domain and port are fine on two servers."""
        uow = FakeUnitOfWorkFactory()
        owner, one = await seeded(uow)
        two = server(owner)
        async with uow() as tx:
            await tx.servers.add(two, None)
            for srv in (one, two):
                inst = installation(srv, "web", domain="x.example.com", host_port=80)
                await tx.installations.save(owner.id, inst, {})

    async def test_saving_on_another_users_server_is_not_found(self) -> None:
        """An installation cannot be saved on someone else's server."""
        uow = FakeUnitOfWorkFactory()
        _, srv = await seeded(uow)
        stranger, _ = await seeded(uow)
        async with uow() as tx:
            with pytest.raises(NotFound):
                await tx.installations.save(stranger.id, installation(srv, "web"), {})

    async def test_idempotency_key_is_unique_per_owner(self) -> None:
        """The same key twice for one owner is a Conflict."""
        uow = FakeUnitOfWorkFactory()
        owner, srv = await seeded(uow)
        inst = installation(srv, "web")
        async with uow() as tx:
            await tx.installations.save(owner.id, inst, {})
            await tx.deployments.add(owner.id, deployment(inst), {}, "key", "fp")
            with pytest.raises(Conflict):
                await tx.deployments.add(owner.id, deployment(inst), {}, "key", "fp")

    async def test_finish_is_once_and_owner_only(self) -> None:
        """Finishing twice is a Conflict; finishing another user's deployment is NotFound."""
        uow = FakeUnitOfWorkFactory()
        owner, srv = await seeded(uow)
        stranger, _ = await seeded(uow)
        inst = installation(srv, "web")
        dep = deployment(inst)
        event = DeploymentEvent(at=NOW, step="done", message=".")
        async with uow() as tx:
            await tx.installations.save(owner.id, inst, {})
            await tx.deployments.add(owner.id, dep, {})
            with pytest.raises(NotFound):
                await tx.deployments.finish(
                    stranger.id, dep.id, DeploymentState.FAILED, NOW, None, event
                )
            with pytest.raises(Conflict):  # queued never jumps to failed (lifecycle table)
                await tx.deployments.finish(
                    owner.id, dep.id, DeploymentState.FAILED, NOW, "x", event
                )
            await tx.commit()
        uow.store.mark_running(dep.id, NOW)
        async with uow() as tx:
            await tx.deployments.finish(owner.id, dep.id, DeploymentState.FAILED, NOW, "x", event)
            with pytest.raises(Conflict):
                await tx.deployments.finish(
                    owner.id, dep.id, DeploymentState.SUCCEEDED, NOW, None, event
                )
            got = await tx.deployments.get(owner.id, dep.id)
        assert got is not None
        assert (got.state, got.error, got.events[-1]) == (DeploymentState.FAILED, "x", event)

    async def test_env_is_sealed(self) -> None:
        """Env values are stored sealed and open to the original values."""
        uow = FakeUnitOfWorkFactory()
        owner, srv = await seeded(uow)
        inst = installation(srv, "web")
        async with uow() as tx:
            await tx.installations.save(owner.id, inst, {"K": "secret-value"})
            await tx.commit()
        assert b"secret-value" not in uow.store.env_sealed(inst.id)
        assert uow.store.env_of(inst.id) == {"K": "secret-value"}


class TestFakeHelpers:
    def test_box_refuses_tampering_and_other_keys(self) -> None:
        """open() raises ValueError for tampered data or another key; digests are keyed."""
        box, other = FakeBox(b"one"), FakeBox(b"two")
        sealed = box.seal(b"hello")
        assert box.open(sealed) == b"hello"
        with pytest.raises(ValueError, match="tampered"):
            box.open(sealed[:-1] + bytes([sealed[-1] ^ 1]))
        with pytest.raises(ValueError, match="tampered"):
            other.open(sealed)
        assert box.digest(b"x") == box.digest(b"x") != other.digest(b"x")

    def test_clock_is_aware_and_moves_only_when_told(self) -> None:
        """The clock stands still, advances on request and refuses naive datetimes."""
        clock = FakeClock(NOW)
        assert clock.now() == NOW == clock.now()
        assert clock.advance(timedelta(minutes=1)) == NOW + timedelta(minutes=1)
        with pytest.raises(ValueError, match="aware"):
            clock.set(datetime(2025, 1, 1))

    def test_hasher_verifies(self) -> None:
        """The fake hasher never stores the password and verifies only the right one."""
        hasher = FakeHasher()
        digest = hasher.hash("pw")
        assert "pw" not in digest
        assert hasher.verify(digest, "pw")
        assert not hasher.verify(digest, "other")
