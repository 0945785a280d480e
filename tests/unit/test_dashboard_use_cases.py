"""The dashboard's use cases (accounts, sessions, invitations, removing a server, a server's
deployments, keeping env values on redeploy) driven through in-memory fakes."""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any
from uuid import uuid4

import builders
import msgspec
import pytest
from berth.adapters.ratelimit import MemoryRateLimiter
from berth.core import commands as c
from berth.core import tokens
from berth.core.commands import parse_deploy
from berth.core.errors import (
    Conflict,
    Forbidden,
    InvalidInput,
    NotFound,
    TooManyAttempts,
    Unauthorized,
)
from berth.core.limits import Limit, LoginThrottle
from berth.core.models import (
    ContainerSnapshot,
    Server,
    Transport,
    User,
)
from berth.core.results import SignUpMode
from berth.core.use_cases.sessions import INVITE_TTL, SESSION_IDLE, SESSION_MAX, SETUP_TTL
from fakes import (
    FakeClock,
)
from wiring import App, build_app, finish, first_sign_up, unique_email

PASSWORD = "correct horse battery staple"
MakeUser = Callable[[], Awaitable[User]]
MakeServer = Callable[[User], Awaitable[Server]]


def open_app(*, open_signup: bool = False, local_managed: bool = False, **limits: int) -> App:
    """The services on fakes, with the sign-up policy and login limits given."""
    clock = FakeClock()
    return build_app(
        open_signup=open_signup,
        local_managed=local_managed,
        throttle=throttle_on(clock, **limits),
        clock=clock,
    )


def throttle_on(clock: FakeClock, **limits: Any) -> LoginThrottle:
    """A login throttle over an in-memory limiter that keeps ``clock``'s time."""
    return LoginThrottle(MemoryRateLimiter(clock=lambda: clock.now().timestamp()), **limits)


async def _wrong_password(app: App, email: str, address: str, *, times: int) -> None:
    """``times`` sign-ins with a wrong password, each refused as Unauthorized."""
    for _ in range(times):
        with pytest.raises(Unauthorized):
            await app.bus.handle(c.SignIn(email=email, password="wrong password", address=address))


def session_hash(session_id: str) -> str:
    return hashlib.sha256(session_id.encode()).hexdigest()


class TestSignUp:
    async def test_first_account_is_always_allowed(self) -> None:
        """On a fresh install the first sign-up succeeds and is signed in at once."""
        app = open_app()
        assert await app.bus.handle(c.SignUpPolicy()) is SignUpMode.FIRST
        started = await first_sign_up(app, unique_email())
        assert await app.bus.handle(c.ResolveSession(session_id=started.session_id)) is not None
        assert await app.bus.handle(c.SignUpPolicy()) is SignUpMode.INVITE

    async def test_the_first_account_needs_the_setup_code(self) -> None:
        """Without the code ``berth serve`` printed, the first sign-up is refused at the
        code's field, saying where the code is; nothing is created."""
        app = open_app()
        for code in (None, "", tokens.generate(tokens.SETUP_PREFIX), tokens.generate()):
            with pytest.raises(Forbidden) as refused:
                await app.bus.handle(c.SignUp(email=unique_email(), password=PASSWORD, invite=code))
            assert refused.value.field == "invite"
            assert "berth serve" in refused.value.detail
        assert app.store.state.users == {}

    async def test_the_setup_code_works_once_and_only_for_the_first_account(self) -> None:
        """A code admits the first account; it, and any other code left over, admits
        nobody afterwards (they are not invitations), and no new code is issued."""
        app = open_app(open_signup=False)
        code, spare = (
            await app.bus.handle(c.IssueSetupCode()),
            await app.bus.handle(c.IssueSetupCode()),
        )
        assert code is not None
        assert spare is not None
        assert tokens.is_well_formed(code, tokens.SETUP_PREFIX)
        assert code not in repr(app.store.state)  # only its hash is kept
        await app.bus.handle(c.SignUp(email=unique_email(), password=PASSWORD, invite=code))
        for used in (code, spare):
            with pytest.raises(Forbidden):
                await app.bus.handle(c.SignUp(email=unique_email(), password=PASSWORD, invite=used))
        assert len(app.store.state.users) == 1
        assert await app.bus.handle(c.IssueSetupCode()) is None

    async def test_open_sign_up_still_needs_the_code_for_the_first_account(self) -> None:
        """Open sign-up admits anyone, but only after the first account, which owns
        berth: that one needs the code all the same."""
        app = open_app(open_signup=True)
        with pytest.raises(Forbidden):
            await app.bus.handle(c.SignUp(email=unique_email(), password=PASSWORD))
        await first_sign_up(app, unique_email())
        await app.bus.handle(c.SignUp(email=unique_email(), password=PASSWORD))
        assert len(app.store.state.users) == 2

    async def test_an_expired_setup_code_is_refused(self) -> None:
        """A code older than a day admits nobody; a new start prints a new one."""
        app = open_app()
        code = await app.bus.handle(c.IssueSetupCode())
        app.clock.advance(SETUP_TTL)
        with pytest.raises(Forbidden, match="expired"):
            await app.bus.handle(c.SignUp(email=unique_email(), password=PASSWORD, invite=code))
        await app.bus.handle(
            c.SignUp(
                email=unique_email(),
                password=PASSWORD,
                invite=await app.bus.handle(c.IssueSetupCode()),
            )
        )

    async def test_an_operators_invitation_also_admits_the_first_account(self) -> None:
        """``berth user invite`` (root on berth's machine) works for the first account."""
        app = open_app()
        await app.bus.handle(
            c.SignUp(
                email=unique_email(),
                password=PASSWORD,
                invite=await app.bus.handle(c.CreateInvite()),
            )
        )
        assert len(app.store.state.users) == 1

    async def test_only_the_hash_of_the_session_id_is_stored(self) -> None:
        """The store holds the session id's SHA-256, never the id itself."""
        app = open_app()
        started = await first_sign_up(app, unique_email())
        assert set(app.store.state.sessions) == {session_hash(started.session_id)}
        assert started.session_id not in repr(app.store.state.sessions)
        assert started.session_id not in repr(started)

    async def test_later_accounts_are_refused_when_sign_up_is_closed(self) -> None:
        """After the first account, sign-up without an invitation is Forbidden."""
        app = open_app()
        await first_sign_up(app, unique_email())
        with pytest.raises(Forbidden):
            await app.bus.handle(c.SignUp(email=unique_email(), password=PASSWORD))
        assert len(app.store.state.users) == 1

    async def test_open_sign_up_admits_anyone(self) -> None:
        """With open sign-up, any number of accounts may be created."""
        app = open_app(open_signup=True)
        await first_sign_up(app, unique_email())
        assert await app.bus.handle(c.SignUpPolicy()) is SignUpMode.OPEN
        await app.bus.handle(c.SignUp(email=unique_email(), password=PASSWORD))
        assert len(app.store.state.users) == 2

    async def test_an_invitation_admits_once(self) -> None:
        """An invitation creates one account; used again it is Forbidden."""
        app = open_app()
        await first_sign_up(app, unique_email())
        invite = await app.bus.handle(c.CreateInvite())
        assert tokens.is_well_formed(invite, tokens.INVITE_PREFIX)
        await app.bus.handle(c.SignUp(email=unique_email(), password=PASSWORD, invite=invite))
        with pytest.raises(Forbidden):
            await app.bus.handle(c.SignUp(email=unique_email(), password=PASSWORD, invite=invite))

    async def test_an_invitation_for_one_address_admits_only_it(self) -> None:
        """An invitation made for an email refuses any other address."""
        app = open_app()
        await first_sign_up(app, unique_email())
        email = unique_email("invited")
        invite = await app.bus.handle(c.CreateInvite(email=email.upper()))
        with pytest.raises(Forbidden, match="another email"):
            await app.bus.handle(c.SignUp(email=unique_email(), password=PASSWORD, invite=invite))
        await app.bus.handle(c.SignUp(email=email, password=PASSWORD, invite=invite))

    @pytest.mark.parametrize(
        "invite",
        ["", "nonsense", tokens.generate(tokens.INVITE_PREFIX), tokens.generate()],
        ids=["empty", "nonsense", "an-unknown-invitation", "an-api-token"],  # the same in every
    )  # process that collects them (pytest-xdist's workers)
    async def test_unknown_invitations_are_refused(self, invite: str) -> None:
        """A malformed, unknown or API-token-shaped invitation is Forbidden."""
        app = open_app()
        await first_sign_up(app, unique_email())
        with pytest.raises(Forbidden):
            await app.bus.handle(c.SignUp(email=unique_email(), password=PASSWORD, invite=invite))

    async def test_an_expired_invitation_is_refused(self) -> None:
        """An invitation older than its lifetime no longer admits anyone."""
        app = open_app()
        await first_sign_up(app, unique_email())
        invite = await app.bus.handle(c.CreateInvite())
        app.clock.advance(INVITE_TTL)
        with pytest.raises(Forbidden):
            await app.bus.handle(c.SignUp(email=unique_email(), password=PASSWORD, invite=invite))

    async def test_bad_email_and_password_are_reported_together(self) -> None:
        """Both fields are reported at once; the password is never echoed."""
        app = open_app()
        with pytest.raises(InvalidInput) as info:
            await app.bus.handle(c.SignUp(email="not-an-email", password="short"))
        assert sorted(e.location for e in info.value.errors) == ["email", "password"]
        assert all(e.value != "short" for e in info.value.errors)

    async def test_a_taken_email_conflicts(self) -> None:
        """Signing up with an email that has an account is a Conflict."""
        app = open_app(open_signup=True)
        email = unique_email()
        await first_sign_up(app, email)
        with pytest.raises(Conflict):
            await app.bus.handle(c.SignUp(email=email.upper(), password=PASSWORD))


class TestSignIn:
    async def test_right_password_begins_a_session(self) -> None:
        """The right email and password give a session of that user."""
        app = open_app()
        email = unique_email()
        await first_sign_up(app, email)
        started = await app.bus.handle(
            c.SignIn(email=email.upper(), password=PASSWORD, address="192.0.2.1")
        )
        found = await app.bus.handle(c.ResolveSession(session_id=started.session_id))
        assert found is not None
        assert found[0].email == email

    async def test_wrong_password_and_unknown_email_look_alike(self) -> None:
        """Both are Unauthorized with the same message."""
        app = open_app()
        email = unique_email()
        await first_sign_up(app, email)
        with pytest.raises(Unauthorized) as wrong:
            await app.bus.handle(
                c.SignIn(email=email, password="not the password", address="192.0.2.1")
            )
        with pytest.raises(Unauthorized) as unknown:
            await app.bus.handle(
                c.SignIn(email=unique_email(), password=PASSWORD, address="192.0.2.1")
            )
        assert wrong.value.detail == unknown.value.detail

    async def test_failures_per_email_and_address_are_throttled(self) -> None:
        """After the limit of failures for an email from one address, even the right
        password waits there; the window passed, it is let in again."""
        app = open_app(per_email=3, per_address=100)
        email = unique_email()
        await first_sign_up(app, email)
        await _wrong_password(app, email, "192.0.2.1", times=3)
        with pytest.raises(TooManyAttempts) as info:
            await app.bus.handle(c.SignIn(email=email, password=PASSWORD, address="192.0.2.1"))
        assert info.value.retry_after > 0
        app.clock.advance(timedelta(minutes=5))
        await app.bus.handle(c.SignIn(email=email, password=PASSWORD, address="192.0.2.1"))

    async def test_failures_elsewhere_never_lock_the_user_out(self) -> None:
        """Failures for an email from other addresses, past its limit at each of them,
        leave its owner's own address free to sign in."""
        app = open_app(per_email=3, per_address=100)
        email = unique_email()
        await first_sign_up(app, email)
        for address in ("203.0.113.1", "203.0.113.2"):
            await _wrong_password(app, email, address, times=3)
            with pytest.raises(TooManyAttempts):
                await app.bus.handle(
                    c.SignIn(email=email, password="wrong password", address=address)
                )
        await app.bus.handle(c.SignIn(email=email, password=PASSWORD, address="198.51.100.1"))

    async def test_failures_per_address_are_throttled(self) -> None:
        """Guessing across many emails from one address is throttled too."""
        app = open_app(per_email=100, per_address=4)
        email = unique_email()
        await first_sign_up(app, email)
        for _ in range(4):  # each guess at another email
            await _wrong_password(app, unique_email(), "203.0.113.9", times=1)
        with pytest.raises(TooManyAttempts):
            await app.bus.handle(c.SignIn(email=email, password=PASSWORD, address="203.0.113.9"))
        await app.bus.handle(c.SignIn(email=email, password=PASSWORD, address="203.0.113.10"))

    async def test_a_success_forgets_the_emails_failures(self) -> None:
        """A successful sign-in clears the count of failures of that email from there."""
        app = open_app(per_email=3, per_address=100)
        email = unique_email()
        await first_sign_up(app, email)
        for _ in range(3):  # 2 failures, then a success: never 3 in a row
            await _wrong_password(app, email, "192.0.2.1", times=2)
            await app.bus.handle(c.SignIn(email=email, password=PASSWORD, address="192.0.2.1"))


class TestSessions:
    async def _session(self, app: App) -> str:
        started = await first_sign_up(app, unique_email())
        return started.session_id

    @pytest.mark.parametrize("session_id", ["", "x", "a" * 43 + "!", "a" * 44])
    async def test_malformed_ids_resolve_to_nobody(self, session_id: str) -> None:
        """An id that cannot be one of berth's resolves to None."""
        app = open_app()
        await self._session(app)
        assert await app.bus.handle(c.ResolveSession(session_id=session_id)) is None

    async def test_sign_out_ends_the_session(self) -> None:
        """After sign-out the id resolves to nobody, and its row is gone."""
        app = open_app()
        session_id = await self._session(app)
        await app.bus.handle(c.SignOut(session_id=session_id))
        assert await app.bus.handle(c.ResolveSession(session_id=session_id)) is None
        assert app.store.state.sessions == {}

    async def test_idle_sessions_expire(self) -> None:
        """A session unused for SESSION_IDLE is over, and deleted when seen."""
        app = open_app()
        session_id = await self._session(app)
        app.clock.advance(SESSION_IDLE)
        assert await app.bus.handle(c.ResolveSession(session_id=session_id)) is None
        assert app.store.state.sessions == {}

    async def test_use_keeps_a_session_alive_up_to_its_maximum(self) -> None:
        """Each use moves the idle expiry, but never past SESSION_MAX after sign-in."""
        app = open_app()
        session_id = await self._session(app)
        step = SESSION_IDLE - timedelta(days=1)
        elapsed = timedelta(0)
        while elapsed + step < SESSION_MAX:
            app.clock.advance(step)
            elapsed += step
            assert await app.bus.handle(c.ResolveSession(session_id=session_id)) is not None
        app.clock.advance(SESSION_MAX - elapsed)
        assert await app.bus.handle(c.ResolveSession(session_id=session_id)) is None

    async def test_resolving_writes_at_most_once_a_minute(self) -> None:
        """Reading a session only records its use once per minute."""
        app = open_app()
        session_id = await self._session(app)
        before = app.store.commits
        for _ in range(5):
            app.clock.advance(5)
            await app.bus.handle(c.ResolveSession(session_id=session_id))
        assert app.store.commits == before
        app.clock.advance(60)
        await app.bus.handle(c.ResolveSession(session_id=session_id))
        assert app.store.commits == before + 1

    async def test_signing_in_purges_expired_sessions(self) -> None:
        """Expired sessions of anyone are deleted when a new one begins."""
        app = open_app()
        email = unique_email()
        first = await first_sign_up(app, email)
        app.clock.advance(SESSION_IDLE + timedelta(seconds=1))
        second = await app.bus.handle(c.SignIn(email=email, password=PASSWORD, address="192.0.2.1"))
        assert set(app.store.state.sessions) == {session_hash(second.session_id)}
        assert session_hash(first.session_id) not in app.store.state.sessions

    async def test_each_session_has_its_own_csrf_token(self) -> None:
        """Two sessions never share a CSRF token, and neither equals a session id."""
        app = open_app()
        email = unique_email()
        one = await first_sign_up(app, email)
        two = await app.bus.handle(c.SignIn(email=email, password=PASSWORD, address="192.0.2.1"))
        assert one.session.csrf_token != two.session.csrf_token
        assert one.session.csrf_token not in (one.session_id, two.session_id)


class TestThrottle:
    async def test_the_budget_refills_evenly_over_the_window(self) -> None:
        """2 failures per 60 s: spent at once, the next attempt waits 30 s (one slot)."""
        clock = FakeClock()
        throttle = throttle_on(clock, per_email=2, per_address=10, window=60.0)
        await throttle.failed("a", "e")
        clock.advance(10)
        await throttle.failed("a", "e")
        assert await throttle.retry_after("a", "e") == 20  # 2 x 30 s from t=0, now t=10
        assert await throttle.retry_after("b", "e") == 0  # the email from elsewhere
        assert await throttle.retry_after("b", "other") == 0
        clock.advance(20)
        assert await throttle.retry_after("a", "e") == 0
        await throttle.succeeded("a", "e")  # forgets the email there, not the address
        assert await throttle.retry_after("a", "e") == 0

    async def test_the_address_keeps_its_count_after_a_success(self) -> None:
        """A success forgets the (email, address) failures but not the address's: one
        address spraying accounts reaches its ceiling all the same."""
        clock = FakeClock()
        throttle = throttle_on(clock, per_email=5, per_address=3, window=60.0)
        for email in ("e1", "e2", "e3"):
            await throttle.failed("a", email)
            await throttle.succeeded("a", email)
        assert await throttle.retry_after("a", "e4") > 0
        assert await throttle.retry_after("b", "e4") == 0

    async def test_keys_hold_no_email(self) -> None:
        """What the limiter stores names a digest of the email, never the address itself."""
        keys: list[str] = []
        limiter = MemoryRateLimiter()

        class Recording:
            async def take(self, key: str, limit: Limit) -> int:
                keys.append(key)
                return await limiter.take(key, limit)

            async def peek(self, key: str, limit: Limit) -> int:
                keys.append(key)
                return await limiter.peek(key, limit)

            async def reset(self, key: str) -> None:
                keys.append(key)
                await limiter.reset(key)

        throttle = LoginThrottle(Recording())
        await throttle.retry_after("192.0.2.1", "ada@example.com")
        await throttle.failed("192.0.2.1", "ada@example.com")
        await throttle.succeeded("192.0.2.1", "ada@example.com")
        assert keys
        assert not [k for k in keys if "ada" in k]
        assert all(len(k) <= 300 for k in keys)  # the SQL limiter's key column


class TestDeleteServer:
    async def _with_everything(self, app: App, owner: User, server: Server) -> None:
        cmd = parse_deploy({"server_id": str(server.id), "name": "web", "image": "nginx:1.27"})
        await app.bus.handle(cmd, owner)
        async with app.uow() as uow:
            await uow.servers.save_snapshot(
                owner.id,
                ContainerSnapshot(server_id=server.id, observed_at=app.clock.now(), containers=()),
            )
            await uow.commit()

    async def test_forgets_the_server_and_everything_under_it(
        self, app: App, owner: User, server: Server
    ) -> None:
        """The server, its installations, deployments and snapshot are gone."""
        await self._with_everything(app, owner, server)
        await app.bus.handle(c.DeleteServer(server_id=server.id), owner)
        state = app.store.state
        assert server.id not in state.servers
        assert not state.installations
        assert not state.deployments
        assert server.id not in state.snapshots
        assert await app.bus.handle(c.ListServers(), owner) == []
        assert app.gateway.disconnected == [server.id]

    async def test_another_users_server_is_not_found(
        self, app: App, server: Server, make_user: MakeUser
    ) -> None:
        """Deleting someone else's server is NotFound and deletes nothing."""
        stranger = await make_user()
        with pytest.raises(NotFound):
            await app.bus.handle(c.DeleteServer(server_id=server.id), stranger)
        with pytest.raises(NotFound):
            await app.bus.handle(c.DeleteServer(server_id=uuid4()), stranger)
        assert server.id in app.store.state.servers

    async def test_a_running_deployment_blocks_it(
        self, app: App, owner: User, server: Server
    ) -> None:
        """While a deployment on the server runs, deleting it is a Conflict."""
        cmd = parse_deploy({"server_id": str(server.id), "name": "web", "image": "nginx:1.27"})
        result = await app.bus.handle(cmd, owner)
        app.store.mark_running(result.deployment.id, app.clock.now())
        with pytest.raises(Conflict):
            await app.bus.handle(c.DeleteServer(server_id=server.id), owner)
        assert server.id in app.store.state.servers

    async def test_the_local_server_stays_while_berth_manages_it(self) -> None:
        """Under ``serve --local`` this machine's server cannot be deleted."""
        app = open_app(local_managed=True)
        owner = await app.bus.handle(c.CreateUser(email=unique_email(), password=PASSWORD))
        async with app.uow() as uow:
            server = builders.a_server(
                owner_id=owner.id,
                name="local",
                transport=Transport.LOCAL,
                address="127.0.0.1",
                created_at=app.clock.now(),
            )
            await uow.servers.add(server, None)
            await uow.commit()
        with pytest.raises(Conflict, match="--local"):
            await app.bus.handle(c.DeleteServer(server_id=server.id), owner)


class TestListDeployments:
    async def test_newest_first_limited_and_owner_scoped(
        self, app: App, owner: User, server: Server, make_user: MakeUser
    ) -> None:
        """A server's deployments come newest first, at most ``limit``; strangers get 404."""
        ids = []
        for port, name in enumerate(("app-a", "app-b", "app-c"), start=8001):
            app.clock.advance(1)
            body = {"server_id": str(server.id), "name": name, "image": "x:1", "port": port}
            cmd = parse_deploy(body)
            ids.append((await app.bus.handle(cmd, owner)).deployment.id)
        found = await app.bus.handle(c.ListDeployments(server_id=server.id, limit=2), owner)
        assert [d.id for d in found] == [ids[2], ids[1]]
        assert found[0].events
        stranger = await make_user()
        with pytest.raises(NotFound):
            await app.bus.handle(c.ListDeployments(server_id=server.id), stranger)


class TestKeepEnv:
    def _cmd(self, server: Server, env: dict[str, str]) -> Any:
        return parse_deploy(
            {"server_id": str(server.id), "name": "web", "image": "nginx:1.27", "env": env}
        )

    async def test_a_kept_key_keeps_its_value(self, app: App, owner: User, server: Server) -> None:
        """A redeploy that keeps a key gets its current value; others take the new one."""
        first = await app.bus.handle(self._cmd(server, {"SECRET": "s3cr3t", "MODE": "a"}), owner)
        await finish(app, owner, first.deployment.id)
        again = await app.bus.handle(
            msgspec.structs.replace(
                self._cmd(server, {"SECRET": "", "MODE": "b", "NEW": "n"}),
                keep_env=frozenset({"SECRET"}),
            ),
            owner,
        )
        assert app.store.deployment_env(again.deployment.id) == {
            "SECRET": "s3cr3t",
            "MODE": "b",
            "NEW": "n",
        }
        assert app.store.env_of(again.installation.id)["SECRET"] == "s3cr3t"

    async def test_keeping_a_key_that_has_no_value_is_invalid(
        self, app: App, owner: User, server: Server
    ) -> None:
        """Keeping a key the installation does not have is an error at that key."""
        with pytest.raises(InvalidInput) as info:
            await app.bus.handle(
                msgspec.structs.replace(
                    self._cmd(server, {"NOPE": ""}), keep_env=frozenset({"NOPE"})
                ),
                owner,
            )
        assert [e.location for e in info.value.errors] == ["env.NOPE"]
        await app.bus.handle(self._cmd(server, {"A": "1"}), owner)
        with pytest.raises(InvalidInput):
            await app.bus.handle(
                msgspec.structs.replace(self._cmd(server, {"B": ""}), keep_env=frozenset({"B"})),
                owner,
            )
