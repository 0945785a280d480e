"""The real thing, started for tests: ``berth serve`` processes on temp data dirs.

Every HTTP response seen through :class:`Api` is checked against the OpenAPI
document the server itself serves (status documented, media type, JSON Schema,
declared headers).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import httpx
from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

if TYPE_CHECKING:
    from berth.core.commands import Command

T = TypeVar("T")
BERTH = str(Path(sys.executable).with_name("berth"))
PASSWORD = "correct horse battery staple"
#: What ``berth serve`` prints on a fresh berth: the first account's one-time link and code.
SETUP_LINK = re.compile(r"(http\S+/signup\?invite=)(berth_setup_[0-9A-Za-z]{49})\b")
#: Seconds a process of berth's may take to start answering. Far more than it takes (a
#: second or two): only a stuck start waits that long, and on a machine whose CPUs other
#: work keeps busy, importing berth alone has taken half a minute.
START_TIMEOUT = 120.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def unique_email(prefix: str = "user") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}@example.com"


def cli(
    data_dir: Path,
    *args: str,
    stdin: str = "",
    env: Mapping[str, str] | None = None,
    check: bool = True,
) -> subprocess.CompletedProcess[str]:
    """Run the ``berth`` command on ``data_dir``."""
    return subprocess.run(
        [BERTH, *args, "--data", str(data_dir)],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=START_TIMEOUT,
        check=check,
        env={**os.environ, **(env or {})},
    )


class OpenApiChecker:
    """Validates responses against the served OpenAPI 3.1 document."""

    def __init__(self, document: dict[str, Any]) -> None:
        self.document = document
        self._registry: Registry[Any] = Registry().with_resource(
            "urn:berth-openapi", Resource.from_contents(document, default_specification=DRAFT202012)
        )
        self._routes: list[tuple[re.Pattern[str], str]] = []
        for template in document["paths"]:
            pattern = "^" + re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(template)) + "$"
            self._routes.append((re.compile(pattern), template))
        self.checked = 0

    def operation(self, method: str, path: str) -> tuple[str, dict[str, Any]] | None:
        # A literal path first (/servers/enroll), as the router does, then templates.
        literal = self.document["paths"].get(path, {}).get(method.lower())
        if literal is not None:
            return path, literal
        for pattern, template in self._routes:
            if pattern.match(path):
                op = self.document["paths"][template].get(method.lower())
                if op is not None:
                    return template, op
        return None

    def check(self, response: httpx.Response) -> None:
        request = response.request
        found = self.operation(request.method, request.url.path)
        if found is None and request.method == "OPTIONS" and response.status_code == 204:
            assert response.headers["allow"], request.url.path  # the route's methods
            return
        if found is None:
            # Unknown routes and methods: must still be problem+json.
            assert response.status_code in (404, 405), (request.method, request.url.path)
            assert response.headers["content-type"].startswith("application/problem+json")
            return
        template, op = found
        status = str(response.status_code)
        documented = op.get("responses", {})
        assert status in documented, (
            f"{request.method} {template} answered {status}, documented: {sorted(documented)}"
        )
        self._check_headers(f"{request.method} {template} {status}", documented[status], response)
        content = documented[status].get("content")
        if not content:
            return
        media_type = response.headers.get("content-type", "").split(";")[0].strip()
        assert media_type in content, (
            f"{request.method} {template} {status}: {media_type} not in {sorted(content)}"
        )
        schema = content[media_type].get("schema")
        if schema is None or not media_type.endswith("json"):
            return
        pointer = "/".join(
            p.replace("~", "~0").replace("/", "~1")
            for p in (
                "paths",
                template,
                request.method.lower(),
                "responses",
                status,
                "content",
                media_type,
                "schema",
            )
        )
        validator = Draft202012Validator(
            {"$ref": f"urn:berth-openapi#/{pointer}"}, registry=self._registry
        )
        errors = sorted(validator.iter_errors(response.json()), key=lambda e: list(e.path))
        assert not errors, f"{request.method} {template} {status}: " + "; ".join(
            f"{list(e.path)}: {e.message}" for e in errors[:5]
        )
        self.checked += 1

    def _resolve(self, node: dict[str, Any]) -> dict[str, Any]:
        while "$ref" in node:
            target: Any = self.document
            for part in node["$ref"].removeprefix("#/").split("/"):
                target = target[part.replace("~1", "/").replace("~0", "~")]
            node = target
        return node

    def _check_headers(
        self, where: str, documented: dict[str, Any], response: httpx.Response
    ) -> None:
        """Every header the response declares: there when required, and as its schema says."""
        for name, declared in documented.get("headers", {}).items():
            header = self._resolve(declared)
            value = response.headers.get(name)
            if value is None:
                assert not header.get("required"), f"{where}: no {name} header"
                continue
            schema = self._resolve(header.get("schema", {}))
            instance: Any = value
            if schema.get("type") == "integer":
                assert re.fullmatch(r"-?[0-9]+", value), f"{where}: {name}: {value!r}"
                instance = int(value)
            errors = list(Draft202012Validator(schema).iter_errors(instance))
            assert not errors, f"{where}: {name}: {value!r}: {errors[0].message}"


class Api(httpx.Client):
    """An httpx client for one berth whose every response is schema-checked."""

    def __init__(self, base_url: str, checker: OpenApiChecker, token: str | None = None) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        super().__init__(
            base_url=base_url,
            headers=headers,
            timeout=30,
            event_hooks={"response": [self._check]},
        )
        self.checker = checker

    def _check(self, response: httpx.Response) -> None:
        response.read()
        self.checker.check(response)


@dataclass
class BerthProcess:
    """One ``berth serve`` on a data dir; start, stop (gracefully or not), start again."""

    data_dir: Path
    env: dict[str, str] = field(default_factory=dict)
    args: list[str] = field(default_factory=list)  # extra ``serve`` flags, e.g. ``--local``
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None
    _checker: OpenApiChecker | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = START_TIMEOUT) -> BerthProcess:
        return self.launch().wait_healthy(timeout)

    def launch(self) -> BerthProcess:
        """Start the process and return at once (``wait_healthy`` waits for it): several
        launched together start at the same time, e.g. on an empty database."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = self.data_dir / f"serve-{self.port}-{int(time.time() * 1000)}.log"
        log = self.log_path.open("wb")
        self.proc = subprocess.Popen(
            [
                BERTH,
                "serve",
                "--data",
                str(self.data_dir),
                "--listen",
                f"127.0.0.1:{self.port}",
                *self.args,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "BERTH_LOG_FORMAT": "json", **self.env},
        )
        return self

    def wait_healthy(self, timeout: float = START_TIMEOUT) -> BerthProcess:
        assert self.proc is not None, "launch() first"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"berth serve exited:\n{self.logs()}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=5).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"berth serve did not become healthy:\n{self.logs()}")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20.0) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        code = self.proc.returncode
        self.proc = None
        return code

    def logs(self) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        return self.log_path.read_text(errors="replace")

    def setup_link(self) -> str:
        """The link to the first account's sign-up that this start printed (a fresh berth:
        no account yet), with its one-time setup code."""
        found = SETUP_LINK.findall(self.logs())
        assert found, f"berth serve printed no setup code:\n{self.logs()}"
        prefix, code = found[-1]
        return prefix + code

    def setup_code(self) -> str:
        """The one-time setup code the first account signs up with (``setup_link``'s)."""
        return self.setup_link().partition("invite=")[2]

    def log_records(self) -> list[dict[str, Any]]:
        """The JSON log lines of the current (or last) start; other lines are skipped."""
        found = []
        for line in self.logs().splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict):
                found.append(record)
        return found

    def wait_for_request_logs(
        self, request_ids: Iterable[str], timeout: float = 10.0
    ) -> dict[str, dict[str, Any]]:
        """The ``request`` log line of each id (written just after the response is sent)."""
        wanted = set(request_ids)
        deadline = time.monotonic() + timeout
        while True:
            seen = {
                r["request_id"]: r
                for r in self.log_records()
                if r.get("event") == "request" and r.get("request_id") in wanted
            }
            if len(seen) == len(wanted) or time.monotonic() > deadline:
                return seen
            time.sleep(0.05)

    @property
    def checker(self) -> OpenApiChecker:
        if self._checker is None:
            # Built on its first request: seconds of CPU, many more on a busy machine
            # (seen timing out at 10 s under a load of 20).
            document = httpx.get(f"{self.url}/api/agent/openapi.json", timeout=120).json()
            self._checker = OpenApiChecker(document)
        return self._checker

    def api(self, token: str | None = None) -> Api:
        return Api(self.url, self.checker, token)

    def new_user(self, prefix: str = "user") -> tuple[str, str]:
        """Create a user with the CLI and give it an API token: ``(email, token)``.

        The CLI gets this process's environment (its ``BERTH_DATABASE_URL``, if any)."""
        email = unique_email(prefix)
        cli(self.data_dir, "user", "create", "--email", email, stdin=PASSWORD + "\n", env=self.env)
        token = cli(
            self.data_dir, "token", "regenerate", "--email", email, env=self.env
        ).stdout.strip()
        return email, token

    def new_users(self, count: int, prefix: str = "user") -> list[tuple[str, str]]:
        """``count`` users with API tokens, ``[(email, token), ...]``, made in one go.

        Through the library facade on this data dir (the same use cases as the CLI,
        while serve runs), because each CLI start costs about a second; tests of the
        CLI itself use :meth:`new_user` and :func:`cli`.
        """
        import berth

        async def make() -> list[tuple[str, str]]:
            made = []
            async with berth.open(
                self.data_dir, database_url=self.env.get("BERTH_DATABASE_URL")
            ) as app:
                for _ in range(count):
                    email = unique_email(prefix)
                    user = await app.create_user(email, PASSWORD)
                    made.append((email, await app.regenerate_token(user)))
            return made

        with ThreadPoolExecutor(1) as pool:  # a loop of its own, even if the caller has one
            return pool.submit(asyncio.run, make()).result()

    def invite_link(self, email: str) -> str:
        """A sign-up link bound to ``email``, as ``berth user invite --email`` prints it (its
        command, ``CreateInvite``), through the library on this data dir: no CLI start."""
        from berth.core.commands import CreateInvite

        return f"{self.url}/signup?invite={self.handle(CreateInvite(email=email))}"

    def token_for(self, email: str) -> str:
        """A new API token for the existing user ``email`` (the old one stops working), as
        ``berth token regenerate --email`` makes it (its command, ``ResetToken``), through
        the library on this data dir: no CLI start (~2 s of CPU on a busy machine)."""
        from berth.core.commands import ResetToken

        return self.handle(ResetToken(email=email))

    def handle(self, command: Command[T]) -> T:
        """What the library's bus on this data dir answers ``command`` (an admin command:
        no actor), in an event loop of its own even if the caller has one."""
        import berth

        async def handled() -> T:
            async with berth.open(
                self.data_dir, database_url=self.env.get("BERTH_DATABASE_URL")
            ) as app:
                return await app.bus.handle(command)

        with ThreadPoolExecutor(1) as pool:
            return pool.submit(asyncio.run, handled()).result()


def serving_one_user(
    data_dir: Path, env: Mapping[str, str], prefix: str
) -> Iterator[tuple[BerthProcess, str]]:
    """For a fixture: a started ``berth serve`` on ``data_dir`` with ``env`` and one new
    user's API token, ``(process, token)``; the process is stopped afterwards."""
    process = BerthProcess(data_dir, env=dict(env)).start()
    _, token = process.new_users(1, prefix)[0]
    yield process, token
    process.stop()


@dataclass
class WorkerProcess:
    """One ``berth worker`` on a data dir (and the environment's database)."""

    data_dir: Path
    env: dict[str, str] = field(default_factory=dict)
    args: list[str] = field(default_factory=list)  # extra ``worker`` flags
    log_path: Path | None = None
    proc: subprocess.Popen[bytes] | None = None

    def launch(self) -> WorkerProcess:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = self.data_dir / f"worker-{uuid.uuid4().hex[:8]}.log"
        self.proc = subprocess.Popen(
            [BERTH, "worker", "--data", str(self.data_dir), *self.args],
            stdout=self.log_path.open("wb"),
            stderr=subprocess.STDOUT,
            env={**os.environ, "BERTH_LOG_FORMAT": "json", **self.env},
        )
        return self

    def logs(self) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        return self.log_path.read_text(errors="replace")

    def worker_id(self, timeout: float = START_TIMEOUT) -> str:
        """The id the worker logged when its loops started."""
        deadline = time.monotonic() + timeout
        while True:
            assert self.proc is not None, "launch() first"
            for line in self.logs().splitlines():
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                if record.get("event") == "background_started" and record.get("worker_id"):
                    return str(record["worker_id"])
            if self.proc.poll() is not None:
                raise RuntimeError(f"berth worker exited:\n{self.logs()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"berth worker did not start:\n{self.logs()}")
            time.sleep(0.1)

    def kill(self) -> None:
        """SIGKILL: the worker dies without a word, holding its leases."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self, timeout: float = 20.0) -> int | None:
        """SIGTERM, then SIGKILL after ``timeout``; the exit code (``None``: not started)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        return self.proc.returncode


class Scrape:
    """One ``GET /metrics``, parsed by prometheus-client's own parser."""

    def __init__(self, text: str) -> None:
        from prometheus_client.parser import text_string_to_metric_families

        self.text = text
        self.samples: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                self.samples[(sample.name, frozenset(sample.labels.items()))] = sample.value

    def value(self, name: str, **labels: str) -> float:
        """The sample ``name{labels}``; 0 when absent (a counter nothing has counted yet)."""
        return self.samples.get((name, frozenset(labels.items())), 0.0)


def scrape(base_url: str, token: str | None = None) -> Scrape:
    """``GET /metrics`` (with the metrics token, if given), which must answer 200."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    response = httpx.get(f"{base_url}/metrics", headers=headers, timeout=10)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    return Scrape(response.text)


#: A valid SSH host key. A server created with it is enrolled (``offline`` until reached),
#: so it takes deploys; one without stays ``pending`` and refuses them (409).
HOST_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"


def new_server(
    api: Api, name: str | None = None, *, enrolled: bool = True, **fields: Any
) -> dict[str, Any]:
    """Create a server through the API (``201``) and return the response body.

    ``enrolled`` (the default) gives it a pinned host key at ``127.0.0.1:1``, where
    nothing answers: it stays ``offline`` and its deployments wait (loopback only, so the
    monitor never dials out). ``enrolled=False``: ``pending``, waiting for its install
    script.
    """
    if enrolled:
        fields = {"hostKeys": [HOST_KEY], "address": "127.0.0.1", "sshPort": 1, **fields}
    body = {"name": name or f"srv-{uuid.uuid4().hex[:10]}", **fields}
    response = api.post("/api/agent/servers", json=body)
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


def queue_deploy(api: Api, server_id: str, name: str, image: str, **fields: Any) -> dict[str, Any]:
    """``POST /api/agent/docker/deploy`` of ``image`` as ``name`` (and any other body
    ``fields``) without ``?wait``: a 202; its body (``deployment``, ``installation``)."""
    body = {"serverId": server_id, "name": name, "image": image, **fields}
    response = api.post("/api/agent/docker/deploy", json=body)
    assert response.status_code == 202, response.text
    queued: dict[str, Any] = response.json()
    return queued


def without_request_id(body: dict[str, Any]) -> dict[str, Any]:
    """A problem body minus its per-request ``requestId``, for comparing two answers."""
    return {k: v for k, v in body.items() if k != "requestId"}


def problem(response: httpx.Response, status: int) -> dict[str, Any]:
    """Assert an RFC 9457 problem with ``status`` and return its body."""
    assert response.status_code == status, (response.status_code, response.text)
    assert response.headers["content-type"].startswith("application/problem+json")
    body: dict[str, Any] = response.json()
    assert body["status"] == status
    assert isinstance(body["title"], str)
    assert body["title"]
    assert isinstance(body["detail"], str)
    assert body["detail"]
    assert isinstance(body["errors"], list)
    return body


def dumps(value: Any) -> bytes:
    return json.dumps(value).encode()
