"""The client commands of ``berth``: a running berth's public API, over HTTP, with a token.

``servers``, ``installations``, ``containers``, ``deploy``, ``deployment``, ``logs``,
``rollback``, ``cancel``, ``revisions``, ``stop``/``start``/``restart``, ``stats``,
``disk``, ``registries list|add|remove`` and ``webhooks list|add|remove|deliveries`` each
make one request (httpx) and print a
compact table, or with ``--json`` the API's body exactly as received.
Exit codes: 0 success, 1 an API error or berth unreachable, 2 a usage error,
3 ``deploy --wait`` (or ``rollback --wait``) ended while the deployment was still
queued or running. ``deploy --follow`` and ``deployment ID --follow`` print each step as
it happens (the deployment's event stream) and exit 0 if it succeeded, 1 otherwise.
The token comes from ``BERTH_TOKEN`` (preferred: argv is visible to other
users of the machine) or ``--token``, and is never printed. A registry password is
never taken from argv: ``--password-stdin``, ``BERTH_REGISTRY_PASSWORD``, or a prompt.
"""

from __future__ import annotations

import argparse
import getpass
import io
import json
import os
import sys
import urllib.parse
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import httpx

__all__ = [
    "COMMANDS",
    "DEFAULT_URL",
    "EXIT_API_ERROR",
    "EXIT_STILL_RUNNING",
    "EXIT_USAGE",
    "UsageError",
    "add_client_parsers",
    "parse_env_args",
    "parse_env_file",
    "render_problem",
    "render_table",
    "run",
]

DEFAULT_URL = "http://127.0.0.1:8080"
COMMANDS = frozenset(
    {
        "servers",
        "installations",
        "containers",
        "deploy",
        "deployment",
        "logs",
        "rollback",
        "cancel",
        "revisions",
        "stop",
        "start",
        "restart",
        "stats",
        "disk",
        "registries",
        "webhooks",
    }
)
EXIT_API_ERROR = 1
EXIT_USAGE = 2
EXIT_STILL_RUNNING = 3
FINAL_STATES = frozenset({"succeeded", "failed", "timed_out", "canceled"})


class UsageError(Exception):
    """The command line cannot be turned into a request (exit code 2)."""


# --- pure parts -----------------------------------------------------------------------


def parse_env_args(items: Iterable[str], where: str = "--env") -> dict[str, str]:
    """``KEY=VALUE`` strings to a dict, split at the first ``=``; the value is untouched.

    The key is not checked here: berth checks it and reports ``body.env.<KEY>``.
    A later key wins over an earlier one.
    """
    env: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise UsageError(f"{where}: expected KEY=VALUE, got {key[:40]!r} with no '='")
        env[key] = value
    return env


def parse_env_file(text: str, name: str = "env file") -> dict[str, str]:
    """An env file: one ``KEY=VALUE`` per line, no quoting, no expansion.

    Lines are split on ``\\n`` only (a ``\\r`` before it is dropped, for CRLF files);
    blank lines and lines whose first non-blank character is ``#`` are skipped; the
    rest of a line after the first ``=`` is the value, byte for byte (``#``, quotes,
    ``$`` and surrounding spaces included).
    """
    items = []
    for number, raw in enumerate(text.split("\n"), start=1):
        line = raw.removesuffix("\r")
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if "=" not in line:
            raise UsageError(f"{name}, line {number}: expected KEY=VALUE")
        items.append(line)
    return parse_env_args(items, name)


def render_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """Left-aligned columns separated by two spaces; ``None`` shows as ``-``."""
    cells = [list(headers)] + [["-" if v is None else _one_line(str(v)) for v in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    ]
    return "\n".join(lines) + "\n"


def render_problem(status: int, body: bytes, url: str) -> str:
    """An error answer as lines for stderr: title, detail, then ``location: message`` each."""
    try:
        problem = json.loads(body)
    except ValueError:
        problem = None
    if not isinstance(problem, dict):
        text = body.decode("utf-8", "replace").strip()[:200]
        return f"berth: HTTP {status}" + (f": {text}" if text else "") + "\n"
    title = str(problem.get("title") or f"HTTP {status}")
    lines = [f"berth: {status} {title}"]
    detail = problem.get("detail")
    if detail and detail != title:
        lines.append(f"  {detail}")
    errors = problem.get("errors")
    for err in errors if isinstance(errors, list) else []:
        if isinstance(err, dict):
            lines.append(f"  {err.get('location', '?')}: {err.get('message', '')}")
    if status == 401:
        lines.append(f"  Check the API token (BERTH_TOKEN or --token) for {url}.")
    request_id = problem.get("requestId")
    if status >= 500 and request_id:
        lines.append(f"  request id: {request_id}")
    return "\n".join(lines) + "\n"


def _one_line(text: str) -> str:
    return text.replace("\r", "\\r").replace("\n", "\\n")


# --- arguments ------------------------------------------------------------------------


def add_client_parsers(parser: argparse.ArgumentParser, sub: Any) -> None:
    """Add the client commands to ``berth``'s subparsers, and their options."""
    # The options go on the top level and on each command, so both
    # `berth --url U servers` and `berth servers --url U` work; SUPPRESS keeps a
    # command's absent option from hiding the top level's.
    for target, default in (
        (parser, None),
        (common := argparse.ArgumentParser(add_help=False), argparse.SUPPRESS),
    ):
        target.add_argument(
            "--url",
            default=default,
            help=f"berth to talk to, client commands (BERTH_URL, default {DEFAULT_URL})",
        )
        target.add_argument(
            "--token",
            default=default,
            help="API token, client commands (BERTH_TOKEN: preferred, argv is visible to others)",
        )
        target.add_argument(
            "--json",
            action="store_true",
            default=False if default is None else default,
            help="print the API's JSON as received (client commands)",
        )

    def client(name: str, help_text: str) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = sub.add_parser(name, help=help_text, parents=[common])
        return p

    servers = client(
        "servers",
        "list your servers; `servers repin ID --fingerprint SHA256:… --key-file F` accepts "
        "the new SSH host key a server offered; `servers install-command ID` prints a new "
        "install command for a pending server (its previous one stops working)",
    )
    servers.add_argument(
        "action",
        nargs="?",
        choices=("list", "repin", "install-command"),
        default="list",
        help="default: list",
    )
    servers.add_argument(
        "server", nargs="?", metavar="SERVER_ID", help="repin, install-command: the server"
    )
    servers.add_argument(
        "--fingerprint",
        metavar="SHA256:…",
        help="repin: the offered key's fingerprint, as `ssh-keygen -lf` prints it on the server",
    )
    servers.add_argument(
        "--key",
        action="append",
        default=[],
        metavar="LINE",
        help="repin: a host public key line (`ssh-ed25519 AAAA…`); repeat it",
    )
    servers.add_argument(
        "--key-file",
        action="append",
        default=[],
        type=Path,
        metavar="FILE",
        help="repin: a file of host public key lines (e.g. a copy of ssh_host_ed25519_key.pub)",
    )
    installations = client("installations", "list the installations on a server")
    installations.add_argument("--server", required=True, metavar="ID")
    installations.add_argument(
        "--all", action="store_true", help="removed installations too (their history is kept)"
    )
    client("containers", "list every container on a server").add_argument(
        "--server", required=True, metavar="ID"
    )
    deploy = client("deploy", "deploy (or redeploy) a Docker application on a server")
    deploy.add_argument("--server", required=True, metavar="ID")
    deploy.add_argument("--name", required=True)
    deploy.add_argument("--image", required=True, help="REPOSITORY:TAG[@sha256:DIGEST]")
    deploy.add_argument("--port", type=int, help="container port (default 3000)")
    deploy.add_argument("--domain")
    deploy.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an environment variable, split at the first '='; repeat it",
    )
    deploy.add_argument(
        "--env-file",
        type=Path,
        metavar="FILE",
        help="KEY=VALUE lines, no quoting; '#' comments and blank lines skipped; --env wins",
    )
    deploy.add_argument(
        "--volume",
        action="append",
        default=[],
        metavar="SPEC",
        help="HOST_PATH:CONTAINER_PATH[:ro|:rw]; repeat it",
    )
    deploy.add_argument(
        "--wait",
        type=int,
        metavar="SECONDS",
        help="wait up to 1-300 s for the result: exit 0 succeeded, 1 failed, 3 still running",
    )
    deploy.add_argument(
        "--follow",
        action="store_true",
        help="print each step as it happens until the end: exit 0 succeeded, 1 otherwise",
    )
    deploy.add_argument("--memory", help="memory limit: bytes, or e.g. 512m, 2g")
    deploy.add_argument("--cpus", type=float, help="CPU limit, e.g. 0.5")
    deploy.add_argument(
        "--restart", choices=("unless-stopped", "always", "on-failure", "no"), help="restart policy"
    )
    deploy.add_argument(
        "--health-path", metavar="PATH", help="HTTP path that must answer 2xx/3xx, e.g. /healthz"
    )
    deploy.add_argument(
        "--command",
        action="append",
        dest="argv",  # ``command`` is the subcommand's name
        metavar="ARG",
        help="the container's command, one argv word each (no shell); repeat it in order",
    )
    deployment = client("deployment", "show a deployment: state, step, error, events")
    deployment.add_argument("id")
    deployment.add_argument(
        "--follow",
        action="store_true",
        help="print its steps (past, then live) until it ends: exit 0 succeeded, 1 otherwise",
    )
    rollback = client("rollback", "deploy an earlier succeeded revision of an installation again")
    rollback.add_argument("installation_id", metavar="INSTALLATION_ID")
    rollback.add_argument(
        "--to", metavar="DEPLOYMENT_ID", help="that revision (default: the one before the current)"
    )
    rollback.add_argument("--wait", type=int, metavar="SECONDS", help="as for deploy")
    cancel = client("cancel", "cancel a queued or running deployment")
    cancel.add_argument("id", metavar="DEPLOYMENT_ID")
    cancel.add_argument("--wait", type=int, metavar="SECONDS", help="wait 1-300 s for the end")
    revisions = client("revisions", "an installation's deployments, newest first")
    revisions.add_argument("installation_id", metavar="INSTALLATION_ID")
    revisions.add_argument("--limit", type=int, metavar="N", help="1-100 (default 20)")
    revisions.add_argument("--before", metavar="DEPLOYMENT_ID", help="the next page after this id")
    for action, text in (
        ("stop", "stop an installation's container (kept; status stopped)"),
        ("start", "start an installation's container again"),
        ("restart", "restart an installation's container"),
    ):
        client(action, text).add_argument("installation_id", metavar="INSTALLATION_ID")
    stats = client("stats", "CPU and memory of an installation's container, sampled now")
    stats.add_argument("installation_id", metavar="INSTALLATION_ID")
    disk = client("disk", "what Docker keeps on a server's disk (images, containers, volumes)")
    disk.add_argument("server_id", metavar="SERVER_ID")
    registries = client("registries", "private registries: credentials your deploys pull with")
    actions = registries.add_subparsers(dest="action", required=True)
    actions.add_parser("list", help="your registries (never a password)", parents=[common])
    add = actions.add_parser(
        "add",
        help="save credentials for a registry host; the password is read from stdin "
        "(--password-stdin), BERTH_REGISTRY_PASSWORD, or a prompt -- never from argv",
        parents=[common],
    )
    add.add_argument("host", metavar="HOST", help="hostname[:port], as in an image reference")
    add.add_argument("--username", "-u", required=True)
    add.add_argument(
        "--password-stdin",
        action="store_true",
        help="read the password (or token) from the first line of stdin",
    )
    remove = actions.add_parser(
        "remove", help="forget a registry's credentials (by id or host)", parents=[common]
    )
    remove.add_argument("registry", metavar="ID_OR_HOST")
    webhooks = client("webhooks", "your webhooks: list, add, remove, read the delivery log")
    actions = webhooks.add_subparsers(dest="webhooks_action", required=True, metavar="ACTION")
    actions.add_parser("list", help="list your webhooks", parents=[common])
    add = actions.add_parser(
        "add", help="add a webhook; prints its signing secret, once", parents=[common]
    )
    add.add_argument("webhook_url", metavar="URL", help="http(s) URL berth POSTs events to")
    add.add_argument(
        "--event",
        action="append",
        required=True,
        dest="events",
        metavar="EVENT",
        help="deployment.succeeded, deployment.failed, deployment.canceled, server.offline "
        "or server.online; repeat it",
    )
    actions.add_parser("remove", help="delete a webhook", parents=[common]).add_argument(
        "webhook_id", metavar="WEBHOOK_ID"
    )
    deliveries = actions.add_parser(
        "deliveries", help="a webhook's deliveries and their attempts", parents=[common]
    )
    deliveries.add_argument("webhook_id", metavar="WEBHOOK_ID")
    deliveries.add_argument("--limit", type=int, metavar="N", help="1-100 (default 50)")
    logs = client("logs", "print the last log lines of an installation's container")
    logs.add_argument("installation_id", metavar="INSTALLATION_ID")
    logs.add_argument("--tail", type=int, metavar="N", help="1-5000 lines (default 100)")
    logs.add_argument(
        "--follow",
        action="store_true",
        help="then print new lines as the app writes them, until its container stops",
    )


# --- HTTP -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


class ApiError(Exception):
    """berth answered with an error, or could not be reached (exit code 1)."""


@dataclass(frozen=True)
class Client:
    url: str
    token: str
    timeout: float = 30.0

    def request(
        self,
        method: str,
        path: str,
        query: Mapping[str, object] | None = None,
        body: object = None,
        wait: float = 0.0,
    ) -> Answer:
        target = self.url.rstrip("/") + path
        if not target.startswith(("http://", "https://")):
            raise UsageError(f"--url must start with http:// or https://, got {self.url!r}")
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body, ensure_ascii=False).encode("utf-8")
            headers["Content-Type"] = "application/json"
        params = {k: str(v) for k, v in (query or {}).items()}
        try:
            response = httpx.request(
                method,
                target,
                params=params,
                content=data,
                headers=headers,
                timeout=self.timeout + wait,
                trust_env=False,  # talk to the URL given, never through a proxy of the env
            )
        except httpx.HTTPError as exc:
            reason = str(exc) or type(exc).__name__
            raise ApiError(f"berth: berth is not reachable at {self.url}: {reason}\n") from exc
        if response.status_code >= 400:
            raise ApiError(render_problem(response.status_code, response.content, self.url))
        return Answer(response.status_code, response.content)

    def events(self, deployment_id: str, out: TextIO) -> str | None:
        """Follow the deployment's event stream, printing each step as ``HH:MM:SS step
        message``; its final state, or ``None`` if the stream ended without one. A
        dropped connection is resumed (``Last-Event-ID``) a few times."""
        target = f"{self.url.rstrip('/')}/api/agent/deployments/{_q(deployment_id)}/events"
        if not target.startswith(("http://", "https://")):
            raise UsageError(f"--url must start with http:// or https://, got {self.url!r}")
        last: str | None = None
        error = ApiError(f"berth: lost the event stream at {self.url}\n")
        for _ in range(_STREAM_RETRIES):
            headers = {"Authorization": f"Bearer {self.token}", "Accept": "text/event-stream"}
            if last is not None:
                headers["Last-Event-ID"] = last
            # No read timeout: the server sends a comment every 15 s while nothing happens.
            timeout = httpx.Timeout(self.timeout, read=60.0)
            try:
                with httpx.stream(
                    "GET", target, headers=headers, timeout=timeout, trust_env=False
                ) as response:
                    if response.status_code >= 400:
                        response.read()
                        raise ApiError(
                            render_problem(response.status_code, response.content, self.url)
                        )
                    for event_id, kind, data in _sse_messages(response.iter_lines()):
                        if event_id is not None:
                            last = event_id
                        if kind == "step":
                            out.write(_step_line(data))
                            out.flush()
                        elif kind == "end":
                            state = json.loads(data).get("state")
                            out.write(f"state: {state}\n")
                            return str(state)
                return None  # closed without an end: the deployment is gone
            except httpx.HTTPError as exc:
                reason = str(exc) or type(exc).__name__
                error = ApiError(f"berth: lost the event stream at {self.url}: {reason}\n")
        raise error

    def follow_logs(self, installation_id: str, tail: int | None, out: TextIO) -> Answer:
        """Print the installation's output as ``logs?follow=1`` streams it, until it ends."""
        target = f"{self.url.rstrip('/')}/api/agent/installations/{_q(installation_id)}/logs"
        if not target.startswith(("http://", "https://")):
            raise UsageError(f"--url must start with http:// or https://, got {self.url!r}")
        params = {"follow": "1", **({"tail": str(tail)} if tail is not None else {})}
        headers = {"Authorization": f"Bearer {self.token}"}
        try:
            with httpx.stream(
                "GET",
                target,
                params=params,
                headers=headers,
                timeout=httpx.Timeout(self.timeout, read=None),  # a quiet app sends nothing
                trust_env=False,
            ) as response:
                if response.status_code >= 400:
                    response.read()
                    raise ApiError(render_problem(response.status_code, response.content, self.url))
                for line in response.iter_lines():
                    out.write(f"{line}\n")
                    out.flush()
        except httpx.HTTPError as exc:
            reason = str(exc) or type(exc).__name__
            raise ApiError(f"berth: lost the log stream at {self.url}: {reason}\n") from exc
        return Answer(200, b"")


_STREAM_RETRIES = 5


def _sse_messages(lines: Iterable[str]) -> Iterable[tuple[str | None, str, str]]:
    """``(id, event, data)`` of each Server-Sent Events message; comments are skipped."""
    event_id: str | None = None
    kind, data = "message", list[str]()
    for line in lines:
        if not line:
            if data:
                yield event_id, kind, "\n".join(data)
            event_id, kind, data = None, "message", []
        elif not line.startswith(":"):
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "id":
                event_id = value
            elif name == "event":
                kind = value
            elif name == "data":
                data.append(value)


def _step_line(data: str) -> str:
    """``HH:MM:SS step message`` of a ``step`` message's data."""
    event = json.loads(data)
    at = str(event.get("at") or "")
    clock = at[11:19] if len(at) >= 19 else at
    return f"{clock} {event.get('step')} {_one_line(str(event.get('message')))}\n"


# --- commands -------------------------------------------------------------------------


def _q(value: str) -> str:
    return urllib.parse.quote(value, safe="")


def _servers(client: Client, args: argparse.Namespace, out: TextIO) -> tuple[Answer, int]:
    if getattr(args, "action", "list") == "repin":
        return _repin(client, args, out)
    if getattr(args, "action", "list") == "install-command":
        return _install_command(client, args, out)
    answer = client.request("GET", "/api/agent/servers")
    if not args.json:
        servers = answer.json().get("servers", [])
        rows = [(s.get("id"), s.get("name"), s.get("status"), s.get("address")) for s in servers]
        out.write(render_table(("ID", "NAME", "STATUS", "ADDRESS"), rows))
        for s in servers:
            if s.get("offeredHostKeyFingerprint"):
                out.write(_key_change(s))
    return answer, 0


def _key_change(server: Mapping[str, Any]) -> str:
    pinned = ", ".join(server.get("hostKeyFingerprints") or []) or "none"
    return (
        f"{server.get('name')}: the SSH host key changed: offered "
        f"{server.get('offeredHostKeyFingerprint')}, pinned {pinned}. If the new key is "
        f"legitimate: berth servers repin {server.get('id')} --fingerprint "
        f"{server.get('offeredHostKeyFingerprint')} --key-file <its .pub file>\n"
    )


def _repin(client: Client, args: argparse.Namespace, out: TextIO) -> tuple[Answer, int]:
    if not args.server:
        raise UsageError("servers repin: give the server's id")
    if not args.fingerprint:
        raise UsageError("servers repin: give --fingerprint (the offered key's, checked on it)")
    keys = list(args.key)
    for path in args.key_file:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"cannot read {path}: {exc}") from None
        keys += [line.strip() for line in text.splitlines() if line.strip()]
    if not keys:
        raise UsageError("servers repin: give the new host keys (--key or --key-file)")
    answer = client.request(
        "POST",
        f"/api/agent/servers/{_q(args.server)}/host-keys",
        body={"hostKeys": keys, "fingerprint": args.fingerprint},
    )
    if not args.json:
        server = answer.json()
        pinned = ", ".join(server.get("hostKeyFingerprints") or [])
        out.write(f"Pinned {pinned} for {server.get('name')}; status {server.get('status')}.\n")
    return answer, 0


def _install_command(client: Client, args: argparse.Namespace, out: TextIO) -> tuple[Answer, int]:
    if not args.server:
        raise UsageError("servers install-command: give the server's id")
    answer = client.request("POST", f"/api/agent/servers/{_q(args.server)}/enrollment-token")
    if not args.json:
        created = answer.json()
        out.write(
            f"Run this on {created.get('name')}, as root or with sudo (valid once, until "
            f"{created.get('enrollmentExpiresAt')}):\n{created.get('installCommand')}\n"
        )
    return answer, 0


def _installations(client: Client, args: argparse.Namespace, out: TextIO) -> tuple[Answer, int]:
    query = {"serverId": args.server} | ({"include": "removed"} if args.all else {})
    answer = client.request("GET", "/api/agent/install", query)
    if not args.json:
        rows = [
            (
                i.get("id"),
                i.get("name"),
                i.get("image"),
                i.get("status"),
                i.get("url"),
                (i.get("lastDeployment") or {}).get("state"),
            )
            for i in answer.json().get("installations", [])
        ]
        out.write(render_table(("ID", "NAME", "IMAGE", "STATUS", "URL", "LAST DEPLOY"), rows))
    return answer, 0


def _containers(client: Client, args: argparse.Namespace, out: TextIO) -> tuple[Answer, int]:
    answer = client.request("GET", f"/api/agent/servers/{_q(args.server)}/containers")
    if not args.json:
        data = answer.json()
        out.write(f"server {data.get('serverStatus')}, observed {data.get('observedAt') or '-'}\n")
        rows = [
            (
                c.get("id", "")[:12],
                c.get("name"),
                c.get("image"),
                c.get("state"),
                ", ".join(_port(p) for p in c.get("ports") or []) or None,
                c.get("installationId"),
            )
            for c in data.get("containers", [])
        ]
        out.write(render_table(("ID", "NAME", "IMAGE", "STATE", "PORTS", "INSTALLATION"), rows))
    return answer, 0


def _port(p: Mapping[str, Any]) -> str:
    inside = f"{p.get('containerPort')}/{p.get('protocol', 'tcp')}"
    if p.get("hostPort") is None:
        return inside
    return f"{p.get('hostIp') or ''}:{p.get('hostPort')}->{inside}"


def _deploy(client: Client, args: argparse.Namespace, out: TextIO) -> tuple[Answer, int]:
    env: dict[str, str] = {}
    if args.env_file is not None:
        try:
            text = args.env_file.read_bytes().decode("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"--env-file {args.env_file}: {exc}") from exc
        env.update(parse_env_file(text, f"--env-file {args.env_file}"))
    env.update(parse_env_args(args.env))
    body: dict[str, object] = {"serverId": args.server, "name": args.name, "image": args.image}
    if args.port is not None:
        body["port"] = args.port
    if args.domain is not None:
        body["domain"] = args.domain
    if env:
        body["env"] = env
    if args.volume:
        body["volumes"] = list(args.volume)
    if args.memory is not None:  # digits alone are bytes, as the API reads a number
        body["memory"] = int(args.memory) if args.memory.isdigit() else args.memory
    for key, value in (
        ("cpus", args.cpus),
        ("restart", args.restart),
        ("healthPath", args.health_path),
        ("command", args.argv),
    ):
        if value is not None:
            body[key] = value
    return _queued(client, args, out, "/api/agent/docker/deploy", body)


def _rollback(client: Client, args: argparse.Namespace, out: TextIO) -> tuple[Answer, int]:
    body = {"deploymentId": args.to} if args.to is not None else None
    path = f"/api/agent/installations/{_q(args.installation_id)}/rollback"
    return _queued(client, args, out, path, body)


def _queued(
    client: Client, args: argparse.Namespace, out: TextIO, path: str, body: object
) -> tuple[Answer, int]:
    """POST a deploy or a rollback; show the deployment; the exit code says how it ended."""
    if getattr(args, "follow", False) and args.wait is not None:
        raise UsageError("give --wait or --follow, not both")
    query = {"wait": args.wait} if args.wait is not None else None
    answer = client.request("POST", path, query, body, wait=float(args.wait or 0))
    data = answer.json()
    deployment = data.get("deployment", {})
    if not args.json:
        installation = data.get("installation", {})
        out.write(
            render_table(
                ("DEPLOYMENT", "STATE", "INSTALLATION", "NAME", "URL"),
                [
                    (
                        deployment.get("id"),
                        deployment.get("state"),
                        installation.get("id"),
                        installation.get("name"),
                        installation.get("url"),
                    )
                ],
            )
        )
        if deployment.get("error"):
            out.write(f"error: {deployment['error']}\n")
    if getattr(args, "follow", False):
        return _follow(client, args, out, str(deployment.get("id")))
    if args.wait is None:
        return answer, 0
    state = deployment.get("state")
    if state == "succeeded":
        return answer, 0
    return answer, EXIT_API_ERROR if state in FINAL_STATES else EXIT_STILL_RUNNING


def _follow(
    client: Client, args: argparse.Namespace, out: TextIO, deployment_id: str
) -> tuple[Answer, int]:
    """Print the deployment's steps until it ends (nothing but the final body with
    ``--json``); exit 0 if it succeeded, 1 if it ended otherwise."""
    state = client.events(deployment_id, io.StringIO() if args.json else out)
    answer = client.request("GET", f"/api/agent/deployments/{_q(deployment_id)}")
    return answer, 0 if state == "succeeded" else EXIT_API_ERROR


def _deployment(client: Client, args: argparse.Namespace, out: TextIO) -> tuple[Answer, int]:
    if args.follow:
        return _follow(client, args, out, args.id)
    answer = client.request("GET", f"/api/agent/deployments/{_q(args.id)}")
    if not args.json:
        d = answer.json()
        for label, key in (
            ("state", "state"),
            ("step", "step"),
            ("error", "error"),
            ("image", "image"),
            ("installation", "installationId"),
            ("created", "createdAt"),
            ("finished", "finishedAt"),
        ):
            out.write(f"{label + ':':<14}{_one_line(str(d.get(key) or '-'))}\n")
        events = d.get("events") or []
        if events:
            out.write("events:\n")
            out.write(
                render_table(
                    ("AT", "STEP", "MESSAGE"),
                    [(e.get("at"), e.get("step"), e.get("message")) for e in events],
                )
            )
    return answer, 0


def _cancel(client: Client, args: argparse.Namespace, out: TextIO) -> tuple[Answer, int]:
    query = {"wait": args.wait} if args.wait is not None else None
    path = f"/api/agent/deployments/{_q(args.id)}/cancel"
    answer = client.request("POST", path, query, wait=float(args.wait or 0))
    if not args.json:
        d = answer.json()
        out.write(render_table(("DEPLOYMENT", "STATE"), [(d.get("id"), d.get("state"))]))
    return answer, 0


def _revisions(client: Client, args: argparse.Namespace, out: TextIO) -> tuple[Answer, int]:
    query: dict[str, object] = {}
    if args.limit is not None:
        query["limit"] = args.limit
    if args.before is not None:
        query["before"] = args.before
    path = f"/api/agent/installations/{_q(args.installation_id)}/deployments"
    answer = client.request("GET", path, query)
    if not args.json:
        data = answer.json()
        rows = [
            (d.get("id"), d.get("state"), d.get("image"), d.get("createdAt"), d.get("rollbackOf"))
            for d in data.get("deployments", [])
        ]
        out.write(render_table(("DEPLOYMENT", "STATE", "IMAGE", "CREATED", "ROLLBACK OF"), rows))
        if data.get("nextBefore"):
            out.write(f"more: --before {data['nextBefore']}\n")
    return answer, 0


def _change(client: Client, args: argparse.Namespace, out: TextIO) -> tuple[Answer, int]:
    path = f"/api/agent/installations/{_q(args.installation_id)}/{args.command}"
    answer = client.request("POST", path)
    if not args.json:
        i = answer.json()
        out.write(
            render_table(("INSTALLATION", "NAME", "STATUS"), [(i["id"], i["name"], i["status"])])
        )
    return answer, 0


def _logs(client: Client, args: argparse.Namespace, out: TextIO) -> tuple[Answer, int]:
    if args.follow:
        if args.json:
            raise UsageError("--follow prints text lines; it has no --json")
        return client.follow_logs(args.installation_id, args.tail, out), 0
    query = {"tail": args.tail} if args.tail is not None else None
    answer = client.request(
        "GET", f"/api/agent/installations/{_q(args.installation_id)}/logs", query
    )
    if not args.json:
        for line in answer.json().get("lines", []):
            out.write(f"{line}\n")
    return answer, 0


def _bytes(value: object) -> str:
    """``123.4 MiB``: bytes in binary units, one decimal; ``-`` for none."""
    if not isinstance(value, int):
        return "-"
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return "-"  # unreachable: GiB ends the loop


def _stats(client: Client, args: argparse.Namespace, out: TextIO) -> tuple[Answer, int]:
    path = f"/api/agent/installations/{_q(args.installation_id)}/stats"
    answer = client.request("GET", path)
    if not args.json:
        body = answer.json()
        stats = body.get("stats")
        if stats is None:
            out.write("no container (never deployed, or removed)\n")
        elif not stats.get("running"):
            out.write(f"container {body.get('containerId')} is not running\n")
        else:
            cpu = stats.get("cpuPercent")
            row = (
                body.get("containerId"),
                "-" if cpu is None else f"{cpu:.1f} %",
                _bytes(stats.get("memoryBytes")),
                _bytes(stats.get("memoryLimitBytes")),
            )
            out.write(render_table(("CONTAINER", "CPU", "MEMORY", "LIMIT"), [row]))
    return answer, 0


def _disk(client: Client, args: argparse.Namespace, out: TextIO) -> tuple[Answer, int]:
    answer = client.request("GET", f"/api/agent/servers/{_q(args.server_id)}/disk")
    if not args.json:
        u = answer.json().get("usage", {})
        rows = [
            ("images", u.get("images"), _bytes(u.get("imagesBytes"))),
            ("containers", u.get("containers"), _bytes(u.get("containersBytes"))),
            ("volumes", u.get("volumes"), _bytes(u.get("volumesBytes"))),
            ("build cache", "-", _bytes(u.get("buildCacheBytes"))),
            ("total", "-", _bytes(u.get("totalBytes"))),
        ]
        out.write(render_table(("WHAT", "COUNT", "SIZE"), rows))
    return answer, 0


def _registry_password(args: argparse.Namespace, environ: Mapping[str, str], stdin: TextIO) -> str:
    """The password of ``registries add``: stdin, the environment, or a prompt; never argv."""
    if args.password_stdin:
        password = stdin.readline().rstrip("\r\n")
    elif environ.get("BERTH_REGISTRY_PASSWORD"):
        password = environ["BERTH_REGISTRY_PASSWORD"]
    elif stdin.isatty():
        password = getpass.getpass(f"Password for {args.username} at {args.host}: ")
    else:
        raise UsageError(
            "no password: pass --password-stdin (and pipe it), set BERTH_REGISTRY_PASSWORD, "
            "or run in a terminal to be asked"
        )
    if not password:
        raise UsageError("the password is empty")
    return password


def _registries(
    client: Client,
    args: argparse.Namespace,
    out: TextIO,
    environ: Mapping[str, str],
    stdin: TextIO,
) -> tuple[Answer, int]:
    if args.action == "add":
        body = {
            "host": args.host,
            "username": args.username,
            "password": _registry_password(args, environ, stdin),
        }
        answer = client.request("POST", "/api/agent/registries", body=body)
        rows = [answer.json()]
    elif args.action == "remove":
        registry_id = args.registry
        if "." in registry_id or ":" in registry_id or registry_id.startswith("localhost"):
            listed = client.request("GET", "/api/agent/registries").json().get("registries", [])
            wanted = registry_id.lower()
            ids = [r.get("id") for r in listed if r.get("host") == wanted]
            if not ids:
                raise ApiError(f"berth: no registry saved for host {args.registry}\n")
            registry_id = ids[0]
        answer = client.request("DELETE", f"/api/agent/registries/{_q(registry_id)}")
        if not args.json:
            out.write(f"removed {args.registry}\n")
        return answer, 0
    else:
        answer = client.request("GET", "/api/agent/registries")
        rows = answer.json().get("registries", [])
    if not args.json:
        out.write(
            render_table(
                ("ID", "HOST", "USERNAME", "ADDED"),
                [(r.get("id"), r.get("host"), r.get("username"), r.get("createdAt")) for r in rows],
            )
        )
    return answer, 0


def _webhooks(client: Client, args: argparse.Namespace, out: TextIO) -> tuple[Answer, int]:
    action = args.webhooks_action
    if action == "add":
        body = {"url": args.webhook_url, "events": list(args.events)}
        answer = client.request("POST", "/api/agent/webhooks", body=body)
        if not args.json:
            w = answer.json()
            out.write(render_table(("WEBHOOK", "URL", "EVENTS"), [_webhook_row(w)]))
            out.write(f"secret: {w.get('secret')}\n(shown once: keep it to check signatures)\n")
        return answer, 0
    if action == "remove":
        answer = client.request("DELETE", f"/api/agent/webhooks/{_q(args.webhook_id)}")
        if not args.json:
            out.write(f"removed {args.webhook_id}\n")
        return answer, 0
    if action == "deliveries":
        query = {"limit": args.limit} if args.limit is not None else None
        path = f"/api/agent/webhooks/{_q(args.webhook_id)}/deliveries"
        answer = client.request("GET", path, query)
        if not args.json:
            rows = []
            for d in answer.json().get("deliveries", []):
                attempts = d.get("attempts") or []
                last = attempts[-1] if attempts else {}
                rows.append(
                    (
                        d.get("messageId"),
                        d.get("event"),
                        d.get("state"),
                        len(attempts),
                        last.get("statusCode"),
                        last.get("error"),
                        d.get("nextAttemptAt"),
                    )
                )
            out.write(
                render_table(
                    ("MESSAGE", "EVENT", "STATE", "ATTEMPTS", "LAST STATUS", "ERROR", "NEXT"),
                    rows,
                )
            )
        return answer, 0
    answer = client.request("GET", "/api/agent/webhooks")
    if not args.json:
        rows = [_webhook_row(w) for w in answer.json().get("webhooks", [])]
        out.write(render_table(("WEBHOOK", "URL", "EVENTS"), rows))
    return answer, 0


def _webhook_row(w: Mapping[str, Any]) -> tuple[Any, ...]:
    return (w.get("id"), w.get("url"), ",".join(w.get("events") or []))


_HANDLERS = {
    "servers": _servers,
    "installations": _installations,
    "containers": _containers,
    "deploy": _deploy,
    "deployment": _deployment,
    "logs": _logs,
    "rollback": _rollback,
    "cancel": _cancel,
    "revisions": _revisions,
    "stop": _change,
    "start": _change,
    "restart": _change,
    "stats": _stats,
    "disk": _disk,
    "webhooks": _webhooks,
}


def run(
    args: argparse.Namespace,
    environ: Mapping[str, str] | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
    stdin: TextIO | None = None,
) -> int:
    """Run one client command; returns the exit code."""
    environ = os.environ if environ is None else environ
    out = sys.stdout if out is None else out
    err = sys.stderr if err is None else err
    stdin = sys.stdin if stdin is None else stdin
    url = args.url or environ.get("BERTH_URL") or DEFAULT_URL
    token = args.token or environ.get("BERTH_TOKEN")
    try:
        if not token:
            raise UsageError("no API token: set BERTH_TOKEN (or pass --token)")
        if args.command == "registries":
            answer, code = _registries(Client(url, token), args, out, environ, stdin)
        else:
            answer, code = _HANDLERS[args.command](Client(url, token), args, out)
    except UsageError as exc:
        err.write(f"berth: {exc}\n")
        return EXIT_USAGE
    except ApiError as exc:
        err.write(str(exc))
        return EXIT_API_ERROR
    except (ValueError, AttributeError) as exc:  # a 2xx body that is not what the API sends
        err.write(f"berth: unexpected answer from {url}: {exc}\n")
        return EXIT_API_ERROR
    if args.json and answer.body:
        text = answer.body.decode("utf-8")
        out.write(text if text.endswith("\n") else text + "\n")
    return code
