"""Step ``build``'s build: the server's Docker Engine builds the image from a context the
control plane made ready, its output reported as events at most once per interval with
every secret redacted, and a failure that quotes the builder's last error line; then
built images beyond an app's newest ``BUILT_IMAGES_KEPT`` go.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable, Collection, Iterable
from pathlib import Path

from ..builds import BUILT_IMAGES_KEPT, build_repository
from ..models import BuildContext, BuildSpec
from ..ports import ContainerRuntime
from ..redaction import REDACT_MIN_LENGTH, REDACTED

__all__ = ["BATCH_LINES", "LINE_MAX", "BuildLog", "build_image", "prune_built_images"]

#: Lines of output one event carries at most (the rest of a batch is counted, not shown).
BATCH_LINES = 200
#: Characters of one line of output kept.
LINE_MAX = 500


class BuildLog:
    """A build's output lines as they come (from the runtime's thread), handed out in
    batches with ``secrets`` redacted (each of at least ``REDACT_MIN_LENGTH``
    characters)."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._lock = threading.Lock()
        self._pending: list[str] = []
        self._secrets: list[str] = []
        self.add_secrets(secrets)

    def add_secrets(self, secrets: Iterable[str]) -> None:
        with self._lock:
            more = {s for s in secrets if len(s) >= REDACT_MIN_LENGTH} | set(self._secrets)
            self._secrets = sorted(more, key=len, reverse=True)

    def add_secret(self, secret: str) -> None:
        self.add_secrets((secret,))

    def write(self, line: str) -> None:
        """One line of output (any thread)."""
        with self._lock:
            self._pending.append(line)

    def redact(self, line: str) -> str:
        for secret in self._secrets:
            line = line.replace(secret, REDACTED)
        return line[:LINE_MAX]

    def take(self) -> str | None:
        """The lines written since the last take, redacted, as one message (``None``: none)."""
        with self._lock:
            lines, self._pending = self._pending, []
        lines = [line for line in (self.redact(line.rstrip()) for line in lines) if line]
        if not lines:
            return None
        skipped = len(lines) - BATCH_LINES
        if skipped > 0:
            lines = [f"({skipped} lines of output not shown)", *lines[-BATCH_LINES:]]
        return "\n".join(lines)


async def build_image(
    docker: ContainerRuntime,
    context: BuildContext,
    build: BuildSpec,
    tag: str,
    log: BuildLog,
    report: Callable[[str], Awaitable[None]],
    *,
    interval: float,
) -> str:
    """Build ``tag`` from ``context`` on the server; its image id.

    ``report`` writes an event: the output so far at most once per ``interval`` seconds,
    and what is left when the build ends (failed or not). Raises the runtime's
    ``RuntimeFailure`` (its detail the builder's last error line, redacted)."""

    async def reporter() -> None:
        while True:
            await asyncio.sleep(interval)
            if (batch := log.take()) is not None:
                await report(batch)

    task = asyncio.create_task(reporter())
    try:
        return await docker.build(
            Path(context.path),
            tag=tag,
            dockerfile=build.dockerfile,
            args=build.args,
            target=build.target,
            output=log.write,
        )
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
        if (batch := log.take()) is not None:
            with contextlib.suppress(Exception):
                await report(batch)


async def prune_built_images(
    docker: ContainerRuntime, container_name: str, keep: Collection[str] = ()
) -> int:
    """Untag the app's built images beyond its newest ``BUILT_IMAGES_KEPT`` (never one in
    ``keep``, the image ids serving); an image goes with its last tag unless a container
    still uses it. How many tags were removed."""
    images = await docker.built_images(build_repository(container_name))
    removed = 0
    for image in images[BUILT_IMAGES_KEPT:]:
        if image.id in keep:
            continue
        for tag in image.tags:
            if await docker.untag(tag):
                removed += 1
    return removed
