"""``DockerRuntime``: one Docker Engine, reached through its HTTP API.

The short calls a deployment and the monitor make many of (inspect, start, stop, a
log's tail, the container list, remove) are made on the event loop itself over kept-alive
connections (``wire.Calls``): no thread, so twenty deployments' calls don't keep the
event loop waiting for the GIL. The rest (create, pull, build, stats, disk usage) goes
through the blocking docker SDK, each call in a worker thread of a pool sized for I/O
(``IO_THREADS``, shared by every server's runtime; asyncio's default pool has
``cpus + 4`` threads, which waits on the network of a few hundred servers), so the
event loop never waits on Docker.
Env values, binds, ports and labels travel as Engine API fields; nothing is ever
formatted into a command line. Every answer is read within a ceiling of bytes
(``max_bytes``, ``wire.capped_body``), and a followed log is read on the event loop
from the Engine's socket, with no thread of its own (``wire.follow``).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import contextvars
import functools
import json
import math
import re
import socket
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote, urlencode
from uuid import UUID

import docker
import docker.errors
import docker.utils
import requests
import structlog
import urllib3.exceptions
from berth.core.errors import RuntimeFailure, ServerUnreachable
from berth.core.models import (
    BuiltImage,
    Container,
    ContainerPort,
    ContainerSpec,
    ContainerState,
    ContainerStats,
    DiskUsage,
    HolderSpec,
    PullProgress,
    RegistryAuth,
    ServerFacts,
)
from berth.core.ports import CALL_LANE, BuildOutput, PullProgressSink
from berth.core.types import DOCKER_HUB
from berth.core.use_cases.holders import HOLDER_LABEL  # never listed as a container
from berth.core.watch import ContainerEvent

from . import wire
from .holder import (
    HOLDER_IMAGE,
    HOLDER_IMAGE_LABEL,
    HOLDER_PATH,
    HOLDER_REPOSITORY,
    HOLDER_VERSION,
    holder_tar,
    machine_of,
)

__all__ = ["MAX_BYTES", "DockerRuntime", "port_clash"]

T = TypeVar("T")

log = structlog.get_logger()

_INSTALLATION_LABEL = "berth.installation"
_SERVER_LABEL = "berth.server"
#: The events of a container that change what it does (``container_events``).
_EVENTS = ["start", "die", "restart", "destroy", "stop", "kill", "oom", "pause", "unpause"]

#: Threads of each pool the SDK's calls run in (one pool per ``CALL_LANE``: a deployment's
#: calls never wait for a thread behind the monitor's): mostly waiting on the network.
IO_THREADS = 64

#: HTTP connections each runtime keeps to its Engine, unless told otherwise (the SDK's own
#: default, 10, is less than the deployments one worker runs on one server at once).
POOL_SIZE = 40

#: Bytes read from one answer of Docker, unless the runtime is given another ceiling.
MAX_BYTES = 16 * 1024 * 1024

#: What Docker before 23.0 answers to ``/system/df`` while it counts for another caller
#: (another berth, ``docker system df``), and how long ``disk_usage`` asks again.
DF_BUSY = "a disk usage operation is already running"
DF_WAIT_SECONDS = 30.0

_executors: dict[str, ThreadPoolExecutor] = {}
_executor_lock = threading.Lock()


def _io_pool() -> ThreadPoolExecutor:
    """The process's pool for Docker calls of the current ``CALL_LANE``, made on first use."""
    lane = CALL_LANE.get()
    with _executor_lock:
        executor = _executors.get(lane)
        if executor is None:
            executor = _executors[lane] = ThreadPoolExecutor(
                max_workers=IO_THREADS, thread_name_prefix=f"berth-docker-{lane}"
            )
        return executor


class DockerRuntime:
    """``ContainerRuntime`` for the Docker Engine at ``base_url``.

    ``base_url`` is what the docker SDK takes: ``unix:///var/run/docker.sock``, a
    forwarded ``unix:///…/<server>.sock``, or ``tcp://host:2375``. ``timeout`` bounds
    every request (for a pull, every wait for the next progress message), so a stuck
    Engine becomes ``ServerUnreachable`` instead of a hang. No I/O happens until the
    first call.

    ``max_bytes`` bounds what is read of each answer (of a pull's, of each progress
    message): past it the call fails with ``RuntimeFailure`` of kind
    ``response-too-large``, saying which call. A followed log is read a line at a time
    (longer lines in pieces), as its reader asks.

    Errors: ``ServerUnreachable`` when the Engine cannot be reached or does not answer
    in time; ``RuntimeFailure`` quoting Docker's explanation when Docker refuses.
    """

    def __init__(
        self,
        base_url: str,
        *,
        version: str = "1.41",
        timeout: float = 30.0,
        max_bytes: int = MAX_BYTES,
        pool_size: int = POOL_SIZE,
    ) -> None:
        self._base_url = base_url
        self._pool_size = pool_size
        self._version = version
        self._timeout = timeout
        self._max_bytes = max_bytes
        self._client: docker.DockerClient | None = None
        self._calls = wire.Calls(base_url, timeout=timeout, max_bytes=max_bytes, keep=pool_size)
        self._lock = threading.Lock()
        self._holder_lock = threading.Lock()  # one holder image import at a time

    def __repr__(self) -> str:
        return f"DockerRuntime({self._base_url!r})"

    # -- plumbing ---------------------------------------------------------------

    def _api(self) -> Any:
        """The low-level ``APIClient``; built on first use, in a worker thread."""
        with self._lock:
            if self._client is None:
                self._client = docker.DockerClient(
                    base_url=self._base_url,
                    version=self._version,
                    timeout=self._timeout,
                    max_pool_size=self._pool_size,
                )
            return self._client.api

    async def _run(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` in a worker thread, translating the SDK's errors into core errors."""
        # As ``asyncio.to_thread`` does, but on the I/O pool; contextvars follow.
        call = functools.partial(contextvars.copy_context().run, _translated, fn)
        return await asyncio.get_running_loop().run_in_executor(_io_pool(), call)

    def _get(self, api: Any, what: str, path: str, *args: str, **params: Any) -> Any:
        """``GET path`` (``{}`` in it filled with ``args``, quoted), its JSON answer read
        within ``max_bytes``; Docker's refusal raised as the SDK raises it."""
        response = api._get(api._url(path, *args), params=params or None, stream=True)
        return self._json(api, response, what)

    def _json(self, api: Any, response: Any, what: str, hint: str = "") -> Any:
        body = wire.capped_body(response, self._max_bytes, what, hint)
        api._raise_for_status(response)
        return _decoded(body, what) if body else None

    def _messages(
        self,
        api: Any,
        path: str,
        what: str,
        held: list[Any],
        stop: threading.Event,
        **request: Any,
    ) -> Iterator[dict[str, Any]]:
        """``POST path`` with ``request``, its answer streamed (and put in ``held``, for a
        cancel to close): each JSON object Docker sends, until ``stop`` is set. A refusal
        before the stream raises as Docker words it."""
        response = api._post(api._url(path), stream=True, timeout=None, **request)
        held.append(response)
        if response.status_code >= 400:
            self._json(api, response, what)  # raises Docker's refusal
        for message in _json_messages(response, self._max_bytes, what):
            if stop.is_set():
                return
            if isinstance(message, dict):
                yield message

    async def _ask(
        self,
        method: str,
        what: str,
        path: str,
        *args: str,
        absent: bool = False,
        within: float | None = None,
        hint: str = "",
        body: bytes | None = None,
        query: Mapping[str, Any] | None = None,
    ) -> bytes | None:
        """``method path`` on the event loop (``{}`` in ``path`` filled with ``args``,
        quoted as the SDK quotes them): the answer's body, ``None``
        for a 404 when ``absent`` is allowed; Docker's refusal as ``RuntimeFailure``."""
        filled = path.format(*(quote(arg, safe="/:") for arg in args))
        query_text = f"?{urlencode(query)}" if query else ""
        status, answer = await self._calls.call(
            method,
            f"/v{self._version}{filled}{query_text}",
            what=what,
            hint=hint,
            body=body,
            within=within,
        )
        if status == 404 and absent:
            return None
        if status >= 400:
            text = wire.error_message(answer, status)
            raise RuntimeFailure(port_clash(text) or text)
        return answer

    async def _ask_json(
        self, what: str, path: str, *args: str, query: Mapping[str, Any] | None = None
    ) -> Any:
        """``GET path``'s JSON answer (``None`` for a 404)."""
        answer = await self._ask("GET", what, path, *args, absent=True, query=query)
        return None if answer is None else _decoded(answer, what)

    def close(self) -> None:
        """Release the HTTP connections. Safe to call more than once; never blocks long."""
        self._calls.close()
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()

    # -- ContainerRuntime -------------------------------------------------------

    async def facts(self) -> ServerFacts:
        version: dict[str, Any] = await self._ask_json("version", "/version") or {}
        info: dict[str, Any] = await self._ask_json("info", "/info") or {}
        return ServerFacts(
            os=_str_or_none(info.get("OperatingSystem")) or _str_or_none(version.get("Os")),
            arch=_str_or_none(info.get("Architecture")) or _str_or_none(version.get("Arch")),
            docker_version=_str_or_none(version.get("Version"))
            or _str_or_none(info.get("ServerVersion")),
            cpus=_int_or_none(info.get("NCPU")),
            memory_bytes=_int_or_none(info.get("MemTotal")),
        )

    async def image_exists(self, image: str) -> bool:
        """Whether ``image`` is present on the server (no registry is asked)."""
        return await self._ask_json("an image's inspect", "/images/{0}/json", image) is not None

    async def image_id(self, image: str) -> str | None:
        found = await self._ask_json("an image's inspect", "/images/{0}/json", image)
        return None if found is None else _str_or_none(found.get("Id"))

    async def pull(
        self,
        image: str,
        *,
        auth: RegistryAuth | None = None,
        progress: PullProgressSink | None = None,
    ) -> None:
        """Pull ``image`` (``:latest`` when it names no tag or digest).

        With ``auth``, Docker's ``X-Registry-Auth`` header carries it (base64url JSON of
        ``username``, ``password``, ``serveraddress``); without, the pull is anonymous
        (berth never lends its own machine's Docker credentials to a user's pull).
        ``progress`` gets the running totals after each of Docker's progress messages.

        Raises ``RuntimeFailure`` quoting Docker, ``kind`` naming the cause (see
        ``ContainerRuntime.pull``) — errors Docker reports mid-stream included.
        Cancelling the call closes the stream, which stops the pull.
        """
        stop = threading.Event()
        holder: list[Any] = []

        def call() -> None:
            api = self._api()
            repository, tag = docker.utils.parse_repository_tag(image)
            headers = {"X-Registry-Auth": _auth_header(auth)}
            params = {"fromImage": repository, "tag": tag or "latest"}
            tally = _PullTally()
            try:
                pulled = self._messages(
                    api, "/images/create", "a pull", holder, stop, params=params, headers=headers
                )
                for message in pulled:
                    detail = _error_of(message)
                    if detail is not None:
                        raise RuntimeFailure(
                            f"Pulling {image} failed: {detail}", kind=_pull_failure(detail)
                        )
                    if tally.add(message) and progress is not None:
                        progress(tally.progress())
            except docker.errors.APIError as exc:
                detail = _explain(exc)
                raise RuntimeFailure(
                    f"Pulling {image} failed: {detail}", kind=_pull_failure(detail)
                ) from exc
            except Exception:
                if stop.is_set():  # the stream was closed on purpose: its read fails
                    return
                raise
            finally:
                if holder:
                    holder[0].close()

        try:
            await self._run(call)
        except asyncio.CancelledError:
            stop.set()
            if holder:
                with contextlib.suppress(Exception):
                    holder[0].close()  # a read blocked in the thread ends
            raise

    async def list_containers(self) -> list[Container]:
        """Newest first. Port holders are not listed: the ports a running holder publishes
        are listed as the ports of the containers that join it (the app's)."""
        return _listed(await self._containers())

    async def find(self, labels: dict[str, str]) -> list[ContainerState]:
        """Newest first."""
        filters = {"label": [f"{key}={value}" for key, value in labels.items()]}
        found = []
        for row in await self._containers(filters):
            state = await self.inspect(row["Id"])
            if state is not None:  # removed between the list and the inspect
                found.append(state)
        return found

    async def _containers(self, filters: dict[str, Any] | None = None) -> list[Any]:
        """Every container's row (``docker ps -a``), ``filters`` as Docker takes them."""
        params: dict[str, Any] = {"all": 1, "limit": -1, "size": 0, "trunc_cmd": 0}
        if filters:
            params["filters"] = json.dumps(filters)
        rows: list[Any] = await self._ask_json(
            "the container list", "/containers/json", query=params
        )
        return rows

    async def create(self, spec: ContainerSpec) -> str:
        """Create (not start) the container ``spec`` describes; returns its id.

        Env is the API's ``Env`` list (no shell ever sees it), the container port is
        published on ``spec.host_ip`` (``host_port`` ``None``: Docker picks a free
        port), ``Binds`` are passed as given, the restart policy is the spec's, memory
        and CPU limits are Docker's ``Memory`` and ``NanoCpus``, and a command is the
        ``Cmd`` argv (no shell: the image's entrypoint gets the words as given).
        """

        def call() -> str:
            api = self._api()
            joined = spec.joins is not None
            host_config = api.create_host_config(
                # Joined to a port holder: its network, its ports (Docker refuses both).
                port_bindings=None
                if joined
                else {f"{spec.container_port}/tcp": (spec.host_ip, spec.host_port)},
                network_mode=f"container:{spec.joins}" if joined else None,
                binds=list(spec.binds),
                restart_policy={"Name": spec.restart.value},
                mem_limit=spec.memory,
                nano_cpus=round(spec.cpus * 1e9) if spec.cpus is not None else None,
            )
            config = api.create_container_config(
                image=spec.image,
                environment=dict(spec.env),
                command=list(spec.command) if spec.command is not None else None,
                ports=None if joined else [(spec.container_port, "tcp")],
                labels=dict(spec.labels),
                host_config=host_config,
                detach=True,
            )
            return self._create(api, config, spec.name)

        return await self._run(call)

    def _create(self, api: Any, config: dict[str, Any], name: str) -> str:
        response = api._post_json(
            api._url("/containers/create"), data=config, params={"name": name}, stream=True
        )
        created: dict[str, Any] = self._json(api, response, "a container's create")
        return str(created["Id"])

    async def create_holder(self, spec: HolderSpec) -> str:
        """The holder runs ``holder.HOLDER_IMAGE``'s program (made on the server by
        ``_holder_image`` when missing), publishes ``spec``'s port, is stopped by SIGKILL
        (its program, PID 1, ignores SIGTERM) and restarted unless stopped."""

        def call() -> str:
            api = self._api()
            host_config = api.create_host_config(
                port_bindings={f"{spec.container_port}/tcp": (spec.host_ip, spec.host_port)},
                restart_policy={"Name": "unless-stopped"},
            )
            config = api.create_container_config(
                image=HOLDER_IMAGE,
                command=[HOLDER_PATH],
                ports=[(spec.container_port, "tcp")],
                labels=dict(spec.labels),
                host_config=host_config,
                detach=True,
                stop_signal="SIGKILL",
            )
            try:  # the image is there but on a server's first holder: no look first
                return self._create(api, config, spec.name)
            except docker.errors.ImageNotFound:
                with self._holder_lock:
                    self._holder_image(api)
            return self._create(api, config, spec.name)

        return await self._run(call)

    def _holder_image(self, api: Any) -> None:
        """Make the holder image on the server unless it is there: its one layer (the
        program for the Engine's ``Architecture``) imported as ``POST /images/create
        ?fromSrc=-`` -- no registry, no build."""
        try:  # another deployment may have made it meanwhile
            self._get(api, "an image's inspect", "/images/{0}/json", HOLDER_IMAGE)
            return
        except docker.errors.NotFound:
            pass
        info: dict[str, Any] = self._get(api, "info", "/info")
        layer = holder_tar(machine_of(_str_or_none(info.get("Architecture"))))
        params = {
            "fromSrc": "-",
            "repo": HOLDER_REPOSITORY,
            "tag": HOLDER_VERSION,
            "changes": [
                f'CMD ["{HOLDER_PATH}"]',
                f"LABEL {HOLDER_IMAGE_LABEL}=true",  # (no STOPSIGNAL: an import refuses it)
            ],
        }
        response = api._post(
            api._url("/images/create"),
            params=params,
            data=layer,
            headers={"Content-Type": "application/tar"},
            stream=True,
        )
        if response.status_code >= 400:
            self._json(api, response, "the port holder's image import")  # raises the refusal
        for message in _json_messages(response, self._max_bytes, "an image import"):
            if isinstance(message, dict) and message.get("error"):
                detail = (message.get("errorDetail") or {}).get("message") or message["error"]
                raise RuntimeFailure(f"Making the port holder's image failed: {detail}")

    async def start(self, container_id: str) -> None:
        await self._ask("POST", "a container's start", "/containers/{0}/start", container_id)

    async def stop(self, container_id: str, grace: float = 10.0) -> None:
        """``grace`` is rounded up to whole seconds (0: SIGKILL at once)."""
        seconds = max(0, math.ceil(grace))
        await self._ask(
            "POST",
            "a container's stop",
            "/containers/{0}/stop",
            container_id,
            within=self._timeout + seconds,
            query={"t": seconds},
        )

    async def inspect(self, container_id: str) -> ContainerState | None:
        """The container's state, or ``None`` if it does not exist. ``running`` is false
        while a crash-looping container waits to restart (``status`` ``restarting``, with
        the last ``exit_code``); ``host_port`` is the published port once started."""
        data = await self._ask_json("a container's inspect", "/containers/{0}/json", container_id)
        return None if data is None else _state(data)

    async def logs(self, container_id: str, tail: int, *, timestamps: bool = False) -> list[str]:
        """Interleaved as Docker stored them; bytes that are not UTF-8 are replaced. Past
        ``max_bytes`` of output, ``RuntimeFailure`` (``response-too-large``)."""
        body = await self._ask(
            "GET",
            "a log read",
            "/containers/{0}/logs",
            container_id,
            hint=": ask for fewer lines",
            query=_log_params(tail, timestamps, follow=False),
        )
        output = wire.Output()
        text = b"".join([*output.feed(body or b""), *output.end()])
        return text.decode("utf-8", errors="replace").splitlines()

    async def follow_logs(
        self, container_id: str, tail: int, *, timestamps: bool = False
    ) -> AsyncIterator[str]:
        """The last ``tail`` lines, then new ones until the container stops: Docker's
        ``logs?follow=1`` read on the event loop from the Engine's socket (``wire.follow``),
        with no thread of its own however long it lasts. Closing this iterator closes
        the connection."""
        query = urlencode(_log_params(tail, timestamps, follow=True))
        path = f"/v{self._version}/containers/{quote(container_id, safe='')}/logs?{query}"
        lines = wire.follow(self._base_url, path, answer_within=self._timeout)
        try:
            async for line in lines:
                yield line
        finally:
            await lines.aclose()

    async def remove(self, container_id: str) -> None:
        """Kill and remove the container at once; one that does not exist (or is already
        being removed) is not an error."""

        try:
            await self._ask(
                "DELETE",
                "a container's removal",
                "/containers/{0}",
                container_id,
                absent=True,
                query={"force": 1},
            )
        except RuntimeFailure as exc:
            if "already in progress" not in str(exc):
                raise

    async def rename(self, container_id: str, name: str) -> None:
        await self._ask(
            "POST",
            "a container's rename",
            "/containers/{0}/rename",
            container_id,
            query={"name": name},
        )

    async def stats(self, container_id: str) -> ContainerStats | None:
        """One sample, as ``docker stats --no-stream``: Docker reads the counters twice, a
        second apart, so the CPU share is measured over that second. A container that
        stops meanwhile gets an empty answer from Docker: a sample of a stopped one."""

        def call() -> ContainerStats | None:
            try:
                data: dict[str, Any] | None = self._get(
                    self._api(), "stats", "/containers/{0}/stats", container_id, stream=False
                )
            except docker.errors.NotFound:
                return None
            return _stats(data or {})

        return await self._run(call)

    async def container_events(
        self, server_id: UUID, since: str | None = None
    ) -> AsyncIterator[ContainerEvent]:
        """``GET /events`` (filters: containers, labelled with an installation of server
        ``server_id``: Docker ANDs label filters; the events
        that change what one does) read on the event loop from the Engine's socket, as
        ``follow_logs`` is: no thread however long it stays open. It ends when the
        connection does; closing the iterator closes the connection."""
        labels = [_INSTALLATION_LABEL, f"{_SERVER_LABEL}={server_id}"]
        filters = {"type": ["container"], "label": labels, "event": _EVENTS}
        query = {"filters": json.dumps(filters)} | ({"since": since} if since else {})
        path = f"/v{self._version}/events?{urlencode(query)}"
        lines = wire.follow(self._base_url, path, answer_within=self._timeout)
        try:
            async for line in lines:
                event = _container_event(line)
                if event is not None:
                    yield event
        finally:
            await lines.aclose()

    async def disk_usage(self) -> DiskUsage:
        """Docker's ``/system/df``: shared image layers counted once (``LayersSize``).

        Docker before 23.0 counts for one caller at a time and refuses the others meanwhile
        (``DF_BUSY``): asked again, the wait growing to a tenth of a second (a refusal is
        cheap; waiting a second between tries lost every race to callers that ask again at
        once, for 30 s: a 502 in CI), for ``DF_WAIT_SECONDS``."""

        def call() -> DiskUsage:
            data: dict[str, Any] = self._get(self._api(), "the disk usage (df)", "/system/df")
            return _disk_usage(data)

        deadline = asyncio.get_running_loop().time() + DF_WAIT_SECONDS
        delay = 0.05
        while True:
            try:
                return await self._run(call)
            except RuntimeFailure as exc:
                if DF_BUSY not in exc.detail or asyncio.get_running_loop().time() > deadline:
                    raise
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.1)

    async def build(
        self,
        context: Path,
        *,
        tag: str,
        dockerfile: str,
        args: Mapping[str, str],
        target: str | None,
        output: BuildOutput,
    ) -> str:
        """``POST /build`` with ``context`` streamed from its file as the body (the Engine
        reads tar and gzip alike), the classic builder's ``pull`` off, intermediate
        containers removed even on failure. Its output lines go to ``output``; an
        ``error`` message ends it as a ``RuntimeFailure`` (``build-failed``) quoting the
        last error line. Cancelling the call closes the stream, which stops the build."""
        stop = threading.Event()
        holder: list[Any] = []
        params: dict[str, Any] = {
            "t": tag,
            "dockerfile": dockerfile,
            "rm": 1,
            "forcerm": 1,
            "pull": 0,
            "buildargs": json.dumps(dict(args)),
            # No ``labels``: the classic builder adds them as one more step (a container
            # created and committed, ~80 ms); a built image is known by its repository.
        }
        if target is not None:
            params["target"] = target

        def call() -> str:
            api = self._api()
            found: str | None = None
            last_error: str | None = None
            try:
                with context.open("rb") as body:
                    built = self._messages(
                        api,
                        "/build",
                        "a build",
                        holder,
                        stop,
                        params=params,
                        data=_chunks(body),
                        headers={"Content-Type": "application/x-tar"},
                    )
                    for message in built:
                        detail = _error_of(message)
                        if detail is not None:
                            last_error = detail.strip()
                            output(last_error)
                            continue
                        text = message.get("stream")
                        if isinstance(text, str):
                            for line in text.splitlines():
                                output(line)
                        aux = message.get("aux")
                        if isinstance(aux, dict) and isinstance(aux.get("ID"), str):
                            found = aux["ID"]
            except docker.errors.APIError as exc:
                raise RuntimeFailure(_explain(exc), kind="build-failed") from exc
            except Exception:
                if stop.is_set():  # the stream was closed on purpose: its read fails
                    return ""
                raise
            finally:
                if holder:
                    holder[0].close()
            if stop.is_set():
                return ""
            if last_error is not None:
                raise RuntimeFailure(last_error, kind="build-failed")
            if found is None:
                found = _str_or_none(
                    self._get(api, "an image's inspect", "/images/{0}/json", tag).get("Id")
                )
            if found is None:
                raise RuntimeFailure(f"The build did not say which image it made ({tag}).")
            return found

        try:
            return await self._run(call)
        except asyncio.CancelledError:
            stop.set()
            if holder:
                _abort(holder[0])  # the read blocked in the thread ends; Docker stops
            raise

    async def built_images(self, repository: str) -> list[BuiltImage]:
        def call() -> list[BuiltImage]:
            filters = json.dumps({"reference": [repository]})
            rows = self._get(self._api(), "the image list", "/images/json", filters=filters)
            images = [
                BuiltImage(
                    id=str(row.get("Id")),
                    tags=tuple(
                        t for t in row.get("RepoTags") or () if t.startswith(f"{repository}:")
                    ),
                    created=int(row.get("Created") or 0),
                )
                for row in rows or ()
                if isinstance(row, dict)
            ]
            return sorted(images, key=lambda i: i.created, reverse=True)

        return await self._run(call)

    async def untag(self, reference: str) -> bool:
        def call() -> bool:
            try:
                self._api().remove_image(reference, force=False, noprune=False)
            except (docker.errors.NotFound, docker.errors.APIError):
                return False
            return True

        return await self._run(call)


def _abort(response: Any) -> None:
    """Shut the socket of a streamed answer down: a read blocked on it in another thread
    ends at once (``close`` would wait for that read, which may never come), and the
    Engine sees its client gone (a build is canceled then)."""
    with contextlib.suppress(Exception):
        response.raw._fp.fp.raw._sock.shutdown(socket.SHUT_RDWR)


def _chunks(body: Any, size: int = 1024 * 1024) -> Iterator[bytes]:
    """A file's bytes a chunk at a time: requests sends a generator chunked, never whole."""
    while chunk := body.read(size):
        yield chunk


# -- translation ------------------------------------------------------------------


def _log_params(tail: int, timestamps: bool, *, follow: bool) -> dict[str, int]:
    """The query of ``/containers/{id}/logs``: both streams, the last ``tail`` lines."""
    return {
        "stdout": 1,
        "stderr": 1,
        "follow": int(follow),
        "tail": max(tail, 0),
        "timestamps": int(timestamps),
    }


def _json_messages(response: Any, limit: int, what: str) -> Iterator[Any]:
    """The JSON messages of a streamed answer (one a line, as Docker writes a pull's
    progress), each read within ``limit`` bytes."""
    pending = b""
    for chunk in response.iter_content(chunk_size=None):
        pending += chunk
        *lines, pending = pending.split(b"\n")
        if len(pending) > limit:
            response.close()
            raise wire.too_large(f"{what} (one message)", limit)
        for line in lines:
            if line.strip():
                yield _decoded(line, what)
    if pending.strip():
        yield _decoded(pending, what)


def _error_of(message: dict[str, Any]) -> str | None:
    """What a streamed message's ``error`` says (its detail's message first); ``None``
    for a message that is no error."""
    if not message.get("error"):
        return None
    return str((message.get("errorDetail") or {}).get("message") or message["error"])


def _decoded(body: bytes, what: str) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        raise RuntimeFailure(f"Docker's answer to {what} is not JSON.") from None


# -- pulls --------------------------------------------------------------------------

#: Docker Hub's address in credentials, as the docker CLI sends it.
_DOCKER_HUB_SERVER = "https://index.docker.io/v1/"
_UNAUTHORIZED = (
    "unauthorized",
    "authentication required",
    "no basic auth credentials",
    "access denied",
    "access to the resource is denied",
    "incorrect username or password",
    "denied:",
)
_NOT_FOUND = (
    "manifest unknown",
    "not found",
    "name unknown",
    "repository name not known",
    "does not exist",
)
_UNREACHABLE = (
    "connection refused",
    "no such host",
    "i/o timeout",
    "timeout",
    "network is unreachable",
    "no route to host",
    "connection reset",
    "tls handshake",
    "server gave http response to https client",
    "eof",
)


def _pull_failure(detail: str) -> str:
    """The kind of a failed pull, from Docker's words: ``registry-unauthorized``,
    ``image-not-found``, ``registry-unreachable`` or ``runtime-failure``.

    Unauthorized is looked for first: Docker words a refused pull of a private image as
    "pull access denied ... does not exist or may require 'docker login'".
    """
    text = detail.lower()
    if any(word in text for word in _UNAUTHORIZED):
        return "registry-unauthorized"
    if any(word in text for word in _NOT_FOUND):
        return "image-not-found"
    if any(word in text for word in _UNREACHABLE):
        return "registry-unreachable"
    return "runtime-failure"


def _auth_header(auth: RegistryAuth | None) -> str:
    """``X-Registry-Auth``: base64url of the JSON credentials; ``{}`` pulls anonymously."""
    config: dict[str, str] = {}
    if auth is not None:
        server = _DOCKER_HUB_SERVER if auth.host == DOCKER_HUB else auth.host
        config = {"username": auth.username, "password": auth.password, "serveraddress": server}
    return base64.urlsafe_b64encode(json.dumps(config).encode("utf-8")).decode("ascii")


class _PullTally:
    """The running totals of a pull, from Docker's progress messages (one per layer
    event: ``Pulling fs layer``, ``Downloading`` with ``current``/``total``,
    ``Download complete``, ``Pull complete``, ``Already exists``)."""

    _LAYER_STATUSES = (
        "Pulling fs layer",
        "Waiting",
        "Downloading",
        "Verifying Checksum",
        "Download complete",
        "Extracting",
        "Pull complete",
        "Already exists",
    )

    def __init__(self) -> None:
        self.current: dict[str, int] = {}
        self.total: dict[str, int] = {}
        self.done: set[str] = set()

    def add(self, message: dict[str, Any]) -> bool:
        """Count one message; whether it was about a layer."""
        status = str(message.get("status") or "")
        layer = message.get("id")
        if not isinstance(layer, str) or not status.startswith(self._LAYER_STATUSES):
            return False
        self.current.setdefault(layer, 0)
        detail: dict[str, Any] = message.get("progressDetail") or {}
        if status == "Downloading":
            self.current[layer] = _int_or_none(detail.get("current")) or self.current[layer]
            total = _int_or_none(detail.get("total"))
            if total:
                self.total[layer] = total
        elif status in ("Download complete", "Extracting", "Pull complete"):
            self.current[layer] = max(self.current[layer], self.total.get(layer, 0))
        if status in ("Pull complete", "Already exists"):
            self.done.add(layer)
        return True

    def progress(self) -> PullProgress:
        return PullProgress(
            layers=len(self.current),
            layers_done=len(self.done),
            bytes_done=sum(self.current.values()),
            bytes_total=sum(self.total.values()),
        )


def _translated(fn: Callable[[], T]) -> T:
    """Call ``fn``; the docker SDK's, requests' and the socket's errors become core errors."""
    try:
        return fn()
    except docker.errors.APIError as exc:
        raise RuntimeFailure(_explain(exc)) from exc
    except requests.exceptions.Timeout as exc:
        raise ServerUnreachable(f"Docker did not answer in time: {exc}") from exc
    except (
        requests.exceptions.RequestException,
        urllib3.exceptions.HTTPError,
        OSError,
    ) as exc:
        raise ServerUnreachable(f"Docker cannot be reached: {_reason(exc)}") from exc
    except docker.errors.DockerException as exc:
        # Raised by the SDK itself, e.g. when version="auto" cannot ask the Engine.
        raise ServerUnreachable(f"Docker cannot be reached: {exc}") from exc


def _explain(exc: docker.errors.APIError) -> str:
    """Docker's own explanation of a refusal, as text (a host-port clash in words)."""
    explanation = exc.explanation
    if isinstance(explanation, bytes):
        explanation = explanation.decode("utf-8", errors="replace")
    text = str(explanation or exc)
    return port_clash(text) or text


#: Docker's two texts for a host port it cannot publish, and who holds the port then:
#: another container (``Bind for 0.0.0.0:8091 failed: port is already allocated``), or a
#: process (``… endpoint web (3f2a…): … listen tcp4 0.0.0.0:8091: bind: address already
#: in use``).
_CLASHES = (
    (
        re.compile(r"Bind for ([0-9a-fA-F.:\[\]]*?):(\d+) failed: port is already allocated"),
        "another container",
    ),
    (
        re.compile(r"listen tcp[46]? ([0-9a-fA-F.:\[\]]*?):(\d+): bind: address already in use"),
        "a process outside Docker",
    ),
)


def port_clash(text: str) -> str | None:
    """Docker's host-port clash (with its endpoint hash) as a sentence a person reads:
    ``Port 8091 is already in use on this server (0.0.0.0:8091, by another container)``;
    ``None`` for any other text."""
    for pattern, holder in _CLASHES:
        found = pattern.search(text)
        if found:
            address, port = found.groups()
            return (
                f"Port {port} is already in use on this server ({address}:{port}, by "
                f"{holder}): choose another port, or stop what holds it."
            )
    return None


def _reason(exc: BaseException) -> str:
    """The innermost cause of a connection error: the useful part of requests' wrapping."""
    seen = exc
    while seen.__context__ is not None and isinstance(seen.__context__, OSError):
        seen = seen.__context__
    return str(seen) or type(seen).__name__


# -- Engine API rows -> core types ---------------------------------------------------


def _state(data: dict[str, Any]) -> ContainerState:
    """A container's inspect as its state."""
    state: dict[str, Any] = data.get("State") or {}
    status = str(state.get("Status") or "unknown")
    # Docker says Running while a crash-looping container waits to restart: that is not up.
    running = bool(state.get("Running")) and not state.get("Restarting")
    exit_code = _int_or_none(state.get("ExitCode"))
    if status in ("created", "running"):
        exit_code = None
    config: dict[str, Any] = data.get("Config") or {}
    mode = str((data.get("HostConfig") or {}).get("NetworkMode") or "")
    return ContainerState(
        id=str(data["Id"]),
        name=str(data.get("Name") or "").lstrip("/"),
        status=status,
        running=running,
        exit_code=exit_code,
        host_port=_published_port(data),
        labels=dict(config.get("Labels") or {}),
        restart_count=_int_or_none(data.get("RestartCount")) or 0,
        started_at=_docker_time(state.get("StartedAt")),
        finished_at=_docker_time(state.get("FinishedAt")),
        joins=_joined(mode),
    )


def _docker_time(value: object) -> datetime | None:
    """An RFC 3339 time of Docker's (nanoseconds cut to microseconds); ``None`` for none
    or Docker's zero time (``0001-01-01T00:00:00Z``: never)."""
    if not isinstance(value, str) or not value or value.startswith("0001-"):
        return None
    text = value.replace("Z", "+00:00")
    main, dot, rest = text.partition(".")
    if dot:
        digits = len(rest) - len(rest.lstrip("0123456789"))
        text = f"{main}.{rest[: min(digits, 6)]}{rest[digits:]}"
    try:
        return datetime.fromisoformat(text).astimezone(UTC)
    except ValueError:
        return None


def _container_event(line: str) -> ContainerEvent | None:
    """One line of Docker's event stream, or ``None`` if it is not a container's event."""
    try:
        data = json.loads(line)
    except ValueError:
        return None
    if not isinstance(data, dict) or data.get("Type") != "container":
        return None
    actor: dict[str, Any] = data.get("Actor") or {}
    attributes: dict[str, Any] = actor.get("Attributes") or {}
    nanos = _int_or_none(data.get("timeNano"))
    since = f"{nanos // 10**9}.{nanos % 10**9:09d}" if nanos is not None else str(data.get("time"))
    return ContainerEvent(
        action=str(data.get("Action") or data.get("status") or ""),
        container_id=str(actor.get("ID") or data.get("id") or ""),
        installation_id=_uuid_or_none(attributes.get(_INSTALLATION_LABEL)),
        since=since,
    )


def _published_port(data: dict[str, Any]) -> int | None:
    """The host port of the container's first published TCP port: the bound one once
    running, else the one asked for (``None`` until Docker has picked one)."""
    network: dict[str, Any] = data.get("NetworkSettings") or {}
    host_config: dict[str, Any] = data.get("HostConfig") or {}
    for bindings_by_port in (network.get("Ports") or {}, host_config.get("PortBindings") or {}):
        for key in sorted(bindings_by_port):
            if not key.endswith("/tcp"):
                continue
            for binding in bindings_by_port[key] or []:
                port = _int_or_none(binding.get("HostPort"))
                if port:
                    return port
    return None


def _joined(network_mode: str) -> str | None:
    """The container whose network one joins (``NetworkMode`` ``container:<name or id>``)."""
    if not network_mode.startswith("container:"):
        return None
    return network_mode.removeprefix("container:") or None


def _listed(rows: list[dict[str, Any]]) -> list[Container]:
    """The rows of ``/containers/json`` as containers, port holders left out: the ports
    of a holder are listed as those of the containers that join it (``container:<name
    or id>``), so an app's container shows the host port that reaches it."""
    held: dict[str, list[Any]] = {}
    for row in rows:
        if HOLDER_LABEL in (row.get("Labels") or {}):
            names: list[str] = row.get("Names") or []
            for key in [str(row["Id"]), *(name.lstrip("/") for name in names)]:
                held[key] = row.get("Ports") or []
    listed = []
    for row in rows:
        if HOLDER_LABEL in (row.get("Labels") or {}):
            continue
        joined = _joined(str((row.get("HostConfig") or {}).get("NetworkMode") or ""))
        if joined is not None and joined in held:
            row = {**row, "Ports": [*(row.get("Ports") or []), *held[joined]]}
        listed.append(_container(row))
    return listed


def _container(row: dict[str, Any]) -> Container:
    names: list[str] = row.get("Names") or []
    labels: dict[str, str] = row.get("Labels") or {}
    created = _int_or_none(row.get("Created"))
    return Container(
        id=str(row["Id"]),
        name=names[0].lstrip("/") if names else str(row["Id"])[:12],
        image=str(row.get("Image") or ""),
        state=str(row.get("State") or ""),
        status=str(row.get("Status") or ""),
        created_at=datetime.fromtimestamp(created, UTC) if created is not None else None,
        ports=tuple(
            ContainerPort(
                container_port=int(port["PrivatePort"]),
                host_ip=port.get("IP") or None,
                host_port=_int_or_none(port.get("PublicPort")),
                protocol=str(port.get("Type") or "tcp"),
            )
            for port in row.get("Ports") or []
            if port.get("PrivatePort") is not None
        ),
        installation_id=_uuid_or_none(labels.get(_INSTALLATION_LABEL)),
        image_id=str(row["ImageID"]) if row.get("ImageID") else None,
    )


def _stats(data: dict[str, Any]) -> ContainerStats:
    """``docker stats``' own arithmetic over a stats sample: CPU is the container's share
    of the host's CPU time between the two readings, times the CPUs online; memory is
    the usage minus the inactive page cache (cgroup v2 ``inactive_file``, v1
    ``total_inactive_file``)."""
    cpu: dict[str, Any] = data.get("cpu_stats") or {}
    before: dict[str, Any] = data.get("precpu_stats") or {}
    used = _int_or_none((cpu.get("cpu_usage") or {}).get("total_usage"))
    used_before = _int_or_none((before.get("cpu_usage") or {}).get("total_usage"))
    system = _int_or_none(cpu.get("system_cpu_usage"))
    system_before = _int_or_none(before.get("system_cpu_usage"))
    online = _int_or_none(cpu.get("online_cpus")) or len(
        (cpu.get("cpu_usage") or {}).get("percpu_usage") or ()
    )
    cpu_percent = None
    if (
        used is not None
        and used_before is not None
        and system is not None
        and system_before is not None
        and online
        and system > system_before
        and used >= used_before
    ):
        cpu_percent = round((used - used_before) / (system - system_before) * online * 100, 2)
    memory: dict[str, Any] = data.get("memory_stats") or {}
    usage = _int_or_none(memory.get("usage"))
    details: dict[str, Any] = memory.get("stats") or {}
    cache = _int_or_none(details.get("inactive_file"))
    if cache is None:
        cache = _int_or_none(details.get("total_inactive_file")) or 0
    memory_bytes = max(usage - cache, 0) if usage is not None else None
    limit = _int_or_none(memory.get("limit"))
    return ContainerStats(
        running=bool(data.get("pids_stats")) or memory_bytes is not None,
        cpu_percent=cpu_percent,
        memory_bytes=memory_bytes,
        memory_limit_bytes=limit or None,
    )


def _disk_usage(data: dict[str, Any]) -> DiskUsage:
    def total(values: list[int | None]) -> int:
        return sum(v for v in values if v is not None and v > 0)

    # berth's port holders and their image are berth's own, not what the user keeps.
    every_image: list[dict[str, Any]] = data.get("Images") or []
    images = [i for i in every_image if HOLDER_IMAGE_LABEL not in (i.get("Labels") or {})]
    containers = [
        c for c in data.get("Containers") or [] if HOLDER_LABEL not in (c.get("Labels") or {})
    ]
    holder_bytes = total([_int_or_none(i.get("Size")) for i in every_image if i not in images])
    volumes: list[dict[str, Any]] = data.get("Volumes") or []
    cache: list[dict[str, Any]] = data.get("BuildCache") or []

    return DiskUsage(
        images=len(images),
        images_bytes=max(total([_int_or_none(data.get("LayersSize"))]) - holder_bytes, 0),
        containers=len(containers),
        containers_bytes=total([_int_or_none(c.get("SizeRw")) for c in containers]),
        volumes=len(volumes),
        volumes_bytes=total([_int_or_none(_usage_size(v)) for v in volumes]),
        build_cache_bytes=total(
            [_int_or_none(b.get("Size")) for b in cache if not b.get("Shared")]
        ),
    )


def _usage_size(volume: dict[str, Any]) -> object:
    """A volume's size in ``/system/df`` (``-1`` when Docker did not measure it)."""
    usage: dict[str, Any] = volume.get("UsageData") or {}
    return usage.get("Size")


def _uuid_or_none(value: str | None) -> UUID | None:
    with contextlib.suppress(ValueError):
        return UUID(value) if value else None
    return None


def _int_or_none(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    with contextlib.suppress(ValueError):
        return int(value)
    return None


def _str_or_none(value: object) -> str | None:
    return str(value) if value not in (None, "") else None
