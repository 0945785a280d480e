"""What the SQL adapters' test modules share: a fixed time line, unique tags, reads of
what a unit of work stored, the statements an engine sends, and processes released
together on one database."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import builders
from berth.adapters.secrets import KeyBox
from berth.adapters.sql import SqlUnitOfWorkFactory, create_engine, migrate
from berth.core.models import Deployment, Installation, User
from harness import START_TIMEOUT
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
KEY = os.urandom(32)  # the key box's key, one per run (processes started by a test get it)


@contextlib.asynccontextmanager
async def engine_on(url: str) -> AsyncIterator[AsyncEngine]:
    """An engine on the database at ``url``, disposed of after the block."""
    engine = create_engine(url)
    try:
        yield engine
    finally:
        await engine.dispose()


async def add_user(uow: SqlUnitOfWorkFactory) -> User:
    """A new user (:func:`builders.a_user`), stored and committed."""
    user = builders.a_user()
    async with uow() as tx:
        await tx.users.add(user)
        await tx.commit()
    return user


async def migrate_twice(url: str, box: KeyBox) -> None:
    """Migrate the database at ``url`` to the head revision with ``box``, then again: the
    second run must find nothing to do and change nothing."""
    for _ in range(2):
        await asyncio.to_thread(migrate, url, box)


def at(seconds: float) -> datetime:
    """``seconds`` after :data:`T0`."""
    return T0 + timedelta(seconds=seconds)


def tag() -> str:
    """A short unique tag for names and emails."""
    return uuid4().hex[:12]


async def installation_of(
    uow: SqlUnitOfWorkFactory, owner: User, installation_id: UUID
) -> Installation:
    """The stored installation (which must be there), as its owner reads it."""
    async with uow() as tx:
        found = await tx.installations.get(owner.id, installation_id)
    assert found is not None
    return found


async def deployment_of(uow: SqlUnitOfWorkFactory, owner: User, deployment_id: UUID) -> Deployment:
    """The stored deployment (which must be there), as its owner reads it."""
    async with uow() as tx:
        found = await tx.deployments.get(owner.id, deployment_id)
    assert found is not None
    return found


@contextlib.contextmanager
def released_together(
    go: Path, commands: list[list[str]]
) -> Iterator[list[subprocess.Popen[bytes]]]:
    """One process per command (a handful: each a whole interpreter), let go at once: each
    touches ``<go>.ready-<name>`` when past its slow imports and then waits for ``go``,
    which is touched once all are ready. Their output is piped. Any still running when the
    block ends (it failed, or gave up on one) is killed: none is left behind."""
    processes = [
        subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for command in commands
    ]
    try:
        deadline = time.monotonic() + START_TIMEOUT  # a whole interpreter each, on a busy machine
        while len(list(go.parent.glob(f"{go.name}.ready-*"))) < len(processes):
            assert time.monotonic() < deadline, "the processes did not start"
            assert all(p.poll() is None for p in processes), "a process died while starting"
            time.sleep(0.01)
        go.touch()
        yield processes
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait(10)


def finished(process: subprocess.Popen[bytes]) -> str:
    """What ``process`` (of :func:`released_together`) printed, once it exited 0 (given
    :data:`START_TIMEOUT`: on a busy machine the others' work comes first)."""
    stdout, stderr = process.communicate(timeout=START_TIMEOUT)
    assert process.returncode == 0, stderr.decode()
    return stdout.decode()


@contextlib.contextmanager
def statements_sent(engine: AsyncEngine) -> Iterator[list[str]]:
    """The SQL statements the engine sends while the block runs."""
    sent: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        sent.append(statement)

    event.listen(engine.sync_engine, "before_cursor_execute", record)
    try:
        yield sent
    finally:
        event.remove(engine.sync_engine, "before_cursor_execute", record)
