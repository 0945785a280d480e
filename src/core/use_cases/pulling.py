"""Step ``pull``'s pull: with the owner's registry credentials, its progress reported as
events at a bounded rate, and a failure that says which of "not found", "unauthorized"
or "registry unreachable" happened."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

from ..errors import RuntimeFailure
from ..models import Job, PullProgress
from ..ports import ContainerRuntime
from ..types import registry_of

__all__ = ["PULL_FAILURES", "describe_progress", "explain_pull_failure", "pull_image"]

#: The kinds of ``RuntimeFailure`` a pull names (``ContainerRuntime.pull``).
PULL_FAILURES = ("image-not-found", "registry-unauthorized", "registry-unreachable")


def describe_progress(progress: PullProgress) -> str:
    """``Pulling: 2 of 5 layers done, 12.3 of 40.1 MB.``"""
    done = f"{progress.layers_done} of {progress.layers} layers done"
    if progress.bytes_total:
        mb = f"{progress.bytes_done / 1e6:.1f} of {progress.bytes_total / 1e6:.1f} MB"
        return f"Pulling: {done}, {mb}."
    return f"Pulling: {done}."


def explain_pull_failure(image: str, auth_user: str | None, failure: RuntimeFailure) -> str:
    """What went wrong, starting with which of the three it was, then Docker's words."""
    host = registry_of(image)
    quoted = failure.detail
    if failure.kind == "image-not-found":
        return f"not found: registry {host} has no image {image} ({quoted})"
    if failure.kind == "registry-unauthorized":
        if auth_user is None:
            return (
                f"unauthorized: registry {host} refused a pull without credentials; save "
                f"them for {host} (berth registries add {host}) and deploy again ({quoted})"
            )
        return (
            f"unauthorized: registry {host} refused the credentials saved for it "
            f"(user {auth_user}) ({quoted})"
        )
    if failure.kind == "registry-unreachable":
        return (
            f"registry unreachable: {host} did not answer the server's pull of {image}. "
            "Check the image's name and tag (a mistyped one can name a registry that does "
            f"not exist), or the server's network ({quoted})"
        )
    return quoted


async def pull_image(
    job: Job,
    docker: ContainerRuntime,
    image: str,
    report: Callable[[str], Awaitable[None]],
    *,
    interval: float,
) -> None:
    """Pull ``image`` with the job's registry credentials (if its host has any saved).

    ``report`` writes an event: one for the credentials used, then the progress at most
    once per ``interval`` seconds (only when it moved), then one for the whole pull.
    Raises ``RuntimeFailure`` with ``explain_pull_failure``'s message.
    """
    auth = job.registry_auth
    if auth is not None and auth.host != registry_of(image):
        auth = None  # the image of this run is not from the registry the claim looked up
    if auth is not None:
        await report(
            f"Pulling from {auth.host} with the credentials saved for user {auth.username}."
        )
    latest: list[PullProgress] = []  # written by the runtime (any thread), read below

    def record(progress: PullProgress) -> None:
        latest[:] = [progress]

    async def reporter() -> None:
        shown: PullProgress | None = None
        while True:
            await asyncio.sleep(interval)
            now = latest[0] if latest else None
            if now is not None and now != shown:
                shown = now
                await report(describe_progress(now))

    task = asyncio.create_task(reporter())
    try:
        await docker.pull(image, auth=auth, progress=record)
    except RuntimeFailure as exc:
        detail = explain_pull_failure(image, auth.username if auth else None, exc)
        raise RuntimeFailure(detail, kind=exc.kind) from None
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
    if latest:
        final = latest[0]
        size = f", {final.bytes_done / 1e6:.1f} MB downloaded" if final.bytes_done else ""
        await report(f"Pulled {image}: {final.layers} layers{size}.")
