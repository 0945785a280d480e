"""Open streams on a real ``berth serve``: how many one user and one process may hold,
that each ends within seconds of its credential's revocation, that a log follow holds
no OS thread of its own, and the cap on servers per user.

The streams that wait for ever without Docker are a deployment's events while it is
queued for a server berth cannot reach (``BERTH_QUEUE_TIMEOUT`` long); a log follow
needs a running container, deployed through real sshd and Docker.
"""

from __future__ import annotations

import asyncio
import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from deploy_support import (
    FAST_ENV,
    Stack,
    Tenant,
    add_ssh_server,
    deploy,
    deployed,
    host_port,
    open_stack,
    random_host_key,
    wait_online,
)
from harness import PASSWORD, Api, BerthProcess, cli, free_port, new_server, problem
from infra import Sshd

pytestmark = pytest.mark.integration

#: Long enough that a deployment waiting for its server outlives every test here.
WAITING = {"BERTH_QUEUE_TIMEOUT": "600"}
#: How long a revoked stream may go on (the promise is 5 s; the rest is slack for a
#: loaded machine).
DEADLINE = 15.0
_CSRF = re.compile(r'name="_csrf_token" value="([^"]+)"')


@dataclass
class Reading:
    """One streaming GET, read in a task of its own until the server ends it."""

    status: int | None = None
    headers: httpx.Headers | None = None
    body: bytes = b""
    ended_at: float | None = None
    started: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None

    async def _run(self, client: httpx.AsyncClient, path: str, **kwargs: Any) -> None:
        try:
            async with client.stream("GET", path, **kwargs) as response:
                self.status, self.headers = response.status_code, response.headers
                self.started.set()
                async for chunk in response.aiter_raw():
                    self.body += chunk
        except httpx.HTTPError:
            pass  # cut off: ended all the same
        finally:
            self.ended_at = time.monotonic()
            self.started.set()

    async def close(self) -> None:
        """Go away, as a client closing the connection does."""
        assert self.task is not None
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)


async def open_stream(client: httpx.AsyncClient, path: str, **kwargs: Any) -> Reading:
    """Start reading ``path``; returns once its status is known (and, unless it is 200,
    once its whole body is read)."""
    reading = Reading()
    reading.task = asyncio.create_task(reading._run(client, path, **kwargs))
    await asyncio.wait_for(reading.started.wait(), 30)
    if reading.status != 200:
        await asyncio.wait_for(asyncio.shield(reading.task), 30)
    return reading


def async_client(url: str, token: str | None = None, **kwargs: Any) -> httpx.AsyncClient:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.AsyncClient(
        base_url=url, headers=headers, timeout=httpx.Timeout(30, read=300), **kwargs
    )


def waiting_deployment(api: Api, name: str) -> tuple[str, str]:
    """A server berth cannot reach (nothing listens on its port) and a deployment queued
    for it, which waits: ``(server id, deployment id)``."""
    server = new_server(
        api,
        name,
        address="127.0.0.1",
        sshPort=free_port(),
        sshUser="berth",
        hostKeys=[random_host_key()],
    )
    queued = deploy(api, server["id"], name, host_port(), wait=None)
    assert queued.status_code == 202, queued.text
    return server["id"], queued.json()["deployment"]["id"]


def events_path(deployment_id: str) -> str:
    return f"/api/agent/deployments/{deployment_id}/events"


async def ended_after(reading: Reading, revoked_at: float) -> float:
    """Wait (at most ``DEADLINE`` s) for ``reading`` to end; how long after ``revoked_at``."""
    assert reading.task is not None
    await asyncio.wait_for(asyncio.shield(reading.task), DEADLINE)
    assert reading.ended_at is not None
    assert reading.ended_at > revoked_at
    return reading.ended_at - revoked_at


async def still_open_for(seconds: float, *readings: Reading) -> None:
    """Each of ``readings`` stays open for ``seconds`` (longer than one re-check)."""
    await asyncio.sleep(seconds)
    for reading in readings:
        assert reading.ended_at is None, reading.body[-300:]


def regenerate_token(process: BerthProcess, email: str) -> str:
    return cli(process.data_dir, "token", "regenerate", "--email", email).stdout.strip()


# -- limits (no Docker needed) ----------------------------------------------------------


@pytest.fixture
def limited(fresh_berth: BerthProcess) -> BerthProcess:
    fresh_berth.env.update(
        {
            **WAITING,
            "BERTH_STREAMS_PER_USER": "2",
            "BERTH_STREAMS_PER_PROCESS": "3",
            "BERTH_SERVERS_PER_USER": "3",
        }
    )
    return fresh_berth.start()


def _too_many(reading: Reading, limit: str) -> None:
    assert reading.status == 429, reading.body
    assert reading.headers is not None
    assert reading.headers["content-type"].startswith("application/problem+json")
    assert int(reading.headers["retry-after"]) >= 1
    body = httpx.Response(429, content=reading.body).json()
    assert body["type"] == "urn:berth:problem:too-many-streams"
    assert limit in body["detail"]


class TestStreamLimits:
    async def test_streams_past_the_users_and_the_processs_limit_are_429(
        self, limited: BerthProcess
    ) -> None:
        """A user's third stream is a 429 naming BERTH_STREAMS_PER_USER; the process's
        fourth, BERTH_STREAMS_PER_PROCESS; a closed stream gives its place back."""
        (_, alice_token), (_, bob_token) = limited.new_users(2, "streams")
        with limited.api(alice_token) as alice, limited.api(bob_token) as bob:
            _, mine = waiting_deployment(alice, "alice-waits")
            _, theirs = waiting_deployment(bob, "bob-waits")
        async with (
            async_client(limited.url, alice_token) as a,
            async_client(limited.url, bob_token) as b,
        ):
            first = await open_stream(a, events_path(mine))
            second = await open_stream(a, events_path(mine))
            assert (first.status, second.status) == (200, 200)
            _too_many(await open_stream(a, events_path(mine)), "BERTH_STREAMS_PER_USER")
            third = await open_stream(b, events_path(theirs))
            assert third.status == 200
            _too_many(await open_stream(b, events_path(theirs)), "BERTH_STREAMS_PER_PROCESS")
            await first.close()
            deadline = time.monotonic() + DEADLINE
            while True:  # the server notices the client left, then frees the slot
                again = await open_stream(b, events_path(theirs))
                if again.status == 200 or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.2)
            assert again.status == 200
            for reading in (second, third, again):
                await reading.close()


class TestServersPerUser:
    def test_past_the_limit_a_server_is_a_409_naming_it(self, limited: BerthProcess) -> None:
        """A user's fourth server is refused (409 server-limit, naming
        BERTH_SERVERS_PER_USER), nothing is stored; another user still adds one."""
        (_, alice_token), (_, bob_token) = limited.new_users(2, "servers")
        with limited.api(alice_token) as alice, limited.api(bob_token) as bob:
            for i in range(3):
                new_server(alice, f"box-{i}")
            body = problem(alice.post("/api/agent/servers", json={"name": "box-3"}), 409)
            assert body["type"] == "urn:berth:problem:server-limit"
            assert "BERTH_SERVERS_PER_USER" in body["detail"]
            assert len(alice.get("/api/agent/servers").json()["servers"]) == 3
            new_server(bob, "box-0")


# -- revocation -------------------------------------------------------------------------


class TestRevocationWithoutDocker:
    async def test_an_event_stream_ends_when_its_token_is_regenerated(
        self, fresh_berth: BerthProcess
    ) -> None:
        """An open event stream goes on past a re-check while its token holds, and ends
        within seconds once ``berth token regenerate`` revoked it."""
        fresh_berth.env.update(WAITING)
        fresh_berth.start()
        [(email, token)] = fresh_berth.new_users(1, "revoked")
        with fresh_berth.api(token) as api:
            _, deployment = waiting_deployment(api, "waits")
        async with async_client(fresh_berth.url, token) as client:
            reading = await open_stream(client, events_path(deployment))
            assert reading.status == 200
            await still_open_for(6, reading)
            revoked_at = time.monotonic()
            await asyncio.to_thread(regenerate_token, fresh_berth, email)
            await ended_after(reading, revoked_at)
            again = await client.get(events_path(deployment))
            assert again.status_code == 401

    async def test_a_dashboard_stream_ends_when_its_session_signs_out(
        self, fresh_berth: BerthProcess
    ) -> None:
        """The server page's live stream (session cookie) ends within seconds of signing
        out, and not before."""
        fresh_berth.env.update(WAITING)
        fresh_berth.start()
        [(email, token)] = fresh_berth.new_users(1, "signed")
        with fresh_berth.api(token) as api:
            server, deployment = waiting_deployment(api, "waits")
        async with async_client(fresh_berth.url) as browser:
            form = await browser.get("/login")
            csrf = _CSRF.search(form.text)
            assert csrf, form.text
            data = {"email": email, "password": PASSWORD, "_csrf_token": csrf[1], "next": ""}
            assert (await browser.post("/login", data=data)).status_code == 303
            path = f"/servers/{server}/deployments/{deployment}/events"
            reading = await open_stream(browser, path)
            assert reading.status == 200
            assert reading.headers is not None
            assert reading.headers["content-type"].startswith("text/event-stream")
            await still_open_for(6, reading)
            page = await browser.get("/servers")
            csrf = _CSRF.search(page.text)
            assert csrf, page.text
            revoked_at = time.monotonic()
            out = await browser.post("/logout", data={"_csrf_token": csrf[1]})
            assert out.status_code == 303, out.text
            await ended_after(reading, revoked_at)


# -- with a real container ----------------------------------------------------------------

FOLLOWS = 20


@dataclass
class Running:
    stack: Stack
    carol: Tenant
    installation: str


@pytest.fixture(scope="module")
def running(
    tmp_path_factory: pytest.TempPathFactory, echo_image: str, sshd: Sshd
) -> Iterator[Running]:
    """A berth (streams per user above ``FOLLOWS``) and carol, whose app runs on her SSH
    server (so her log follows read Docker through the SSH forward)."""
    env = {**FAST_ENV, **WAITING, "BERTH_STREAMS_PER_USER": str(FOLLOWS + 5)}
    with open_stack(tmp_path_factory.mktemp("streams"), sshd, "streams", env) as stack:
        email, token = stack.berth.new_users(1, "carol")[0]
        carol = Tenant(email, token, stack.berth.api(token))
        try:
            created = add_ssh_server(carol.api, sshd, stack.name("carol-ssh"))
            carol.servers["ssh"] = created["id"]
            wait_online(carol.api, created["id"])
            port = host_port()
            _, installation = deployed(
                deploy(carol.api, created["id"], stack.name("talker"), port), "succeeded"
            )
            yield Running(stack, carol, installation["id"])
        finally:
            carol.api.close()


def _threads(process: BerthProcess) -> int:
    assert process.proc is not None
    return len(os.listdir(f"/proc/{process.proc.pid}/task"))


def logs_path(installation: str) -> str:
    return f"/api/agent/installations/{installation}/logs"


class TestFollows:
    async def test_log_follows_hold_no_thread_each(self, running: Running) -> None:
        """Twenty more log follows open at once leave berth's thread count where it was
        (within a few): a follow is read without an OS thread of its own."""
        berth, carol = running.stack.berth, running.carol
        path = logs_path(running.installation)
        async with async_client(berth.url, carol.token) as client:
            warm = await open_stream(client, path, params={"follow": 1, "tail": 5})
            assert warm.status == 200, warm.body
            await asyncio.sleep(1)
            before = _threads(berth)
            follows = []
            for _ in range(FOLLOWS):
                follows.append(await open_stream(client, path, params={"follow": 1, "tail": 5}))
            assert [f.status for f in follows] == [200] * FOLLOWS
            await asyncio.sleep(1)
            after = _threads(berth)
            assert all(f.ended_at is None for f in follows)
            for reading in (warm, *follows):
                await reading.close()
        assert after - before <= 3, (before, after)

    async def test_a_log_follow_ends_when_its_token_is_regenerated(self, running: Running) -> None:
        """A log follow and an event stream of the same token go on past a re-check, and
        both end within seconds of ``berth token regenerate``."""
        berth, carol = running.stack.berth, running.carol
        _, deployment = waiting_deployment(carol.api, running.stack.name("carol-waits"))
        async with async_client(berth.url, carol.token) as client:
            follow = await open_stream(
                client, logs_path(running.installation), params={"follow": 1, "tail": 5}
            )
            events = await open_stream(client, events_path(deployment))
            assert (follow.status, events.status) == (200, 200)
            await still_open_for(6, follow, events)
            revoked_at = time.monotonic()
            carol.token = await asyncio.to_thread(regenerate_token, berth, carol.email)
            await ended_after(follow, revoked_at)
            await ended_after(events, revoked_at)
