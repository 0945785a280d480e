"""The client commands of ``berth``: a running berth's API through ``berth.client``.

This module only reads argv and prints: each command is one call of the client (or a
stream of it) shown as a compact table, or with ``--json`` the API's body exactly as
received. Exit codes: 0 success, 1 an API error or berth unreachable, 2 a usage error,
3 ``deploy --wait`` (or ``rollback --wait``) ended while the deployment was still queued
or running; ``--follow`` exits 0 if the deployment succeeded, 1 otherwise. The token
comes from ``BERTH_TOKEN`` (preferred: argv is visible to other users of the machine) or
``--token`` and is never printed; a registry password never comes from argv. A secret
berth shows once (a named token's, from ``tokens create``; an invitation's link and
token, from ``members invite``; a webhook's signing secret) is printed that once. Text from
berth or a container is printed with its control characters shown, not sent
(``berth.client.printable``): an app's output cannot drive the terminal.
"""

from __future__ import annotations

import argparse
import getpass
import io
import os
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO
from uuid import UUID

import httpx
import msgspec
from berth.client import (
    DEFAULT_URL,
    FINAL_STATES,
    ApiError,
    BerthError,
    Client,
    DeploymentEnd,
    Response,
    printable,
    render_problem,
)
from berth.client import models as m

from .arguments import COMMANDS, add_client_parsers
from .context import context_tar

__all__ = [
    "COMMANDS",
    "EXIT_API_ERROR",
    "EXIT_STILL_RUNNING",
    "EXIT_USAGE",
    "UsageError",
    "add_client_parsers",
    "credentials",
    "parse_env_args",
    "parse_env_file",
    "render_table",
    "run",
]

EXIT_API_ERROR = 1
EXIT_USAGE = 2
EXIT_STILL_RUNNING = 3

Answer = tuple[Response[Any] | None, int]  # the answer whose body --json prints; the exit code


class UsageError(Exception):
    """The command line cannot be turned into a request (exit code 2)."""


class Refused(Exception):
    """A command that cannot go on, for a reason of its own (exit code 1)."""


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


def text(value: object) -> str:
    """A value as the API writes it (times in RFC 3339, ids as text), on one line, its
    control characters shown; ``None`` as ``-``."""
    if value is None:
        return "-"
    builtin = msgspec.to_builtins(value)
    shown = builtin if isinstance(builtin, str) else str(builtin)
    return printable(shown.replace("\r", "\\r").replace("\n", "\\n"))


def render_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """Left-aligned columns separated by two spaces; ``None`` shows as ``-``."""
    cells = [list(headers)] + [[text(v) for v in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    ]
    return "\n".join(lines) + "\n"


def step_line(step: m.DeploymentStep) -> str:
    """``HH:MM:SS step message`` of one step of a deployment's event stream."""
    return f"{step.at:%H:%M:%S} {text(step.step)} {text(step.message)}\n"


def size(value: int | None) -> str:
    """``123.4 MiB``: bytes in binary units, one decimal; ``-`` for none."""
    if value is None:
        return "-"
    amount = float(value)
    for unit in ("B", "KiB", "MiB"):
        if amount < 1024:
            return f"{amount:.0f} {unit}" if unit == "B" else f"{amount:.1f} {unit}"
        amount /= 1024
    return f"{amount:.1f} GiB"


# --- commands -------------------------------------------------------------------------


def _servers(berth: Client, args: argparse.Namespace, out: TextIO) -> Answer:
    action = getattr(args, "action", "list")
    if action == "add":
        return _add_server(berth, args, out)
    if action in ("remove", "edit", "rename", "repin", "install-command") and not args.server:
        raise UsageError(f"servers {action}: give the server's id")
    if action == "repin":
        return _repin(berth, args, out)
    if action in ("edit", "rename"):
        return _edit_server(berth, args, out)
    if action == "remove":
        removed = berth.delete_server.response(args.server)
        out.write(f"removed {text(args.server)} (its containers run on)\n")
        return removed, 0
    if action == "install-command":
        answer = berth.new_enrollment_token.response(args.server)
        created = answer.body
        out.write(
            f"Run this on {text(created.name)}, as root or with sudo (valid once, until "
            f"{text(created.enrollment_expires_at)}):\n{text(created.install_command)}\n"
        )
        return answer, 0
    listed = berth.servers.response()
    servers = listed.body.servers
    out.write(
        render_table(
            ("ID", "NAME", "STATUS", "ADDRESS"),
            [(s.id, s.name, s.status, s.address) for s in servers],
        )
    )
    for s in servers:
        if s.offered_host_key_fingerprint:
            offered, pinned = s.offered_host_key_fingerprint, ", ".join(s.host_key_fingerprints)
            out.write(
                f"{text(s.name)}: the SSH host key changed: offered {text(offered)}, pinned "
                f"{text(pinned or 'none')}. If the new key is legitimate: berth servers repin "
                f"{s.id} --fingerprint {text(offered)} --key-file <its .pub file>\n"
            )
    return listed, 0


def _edit_server(berth: Client, args: argparse.Namespace, out: TextIO) -> Answer:
    """``servers edit ID [--name] [--address] [--ssh-port]`` and ``servers rename ID NAME``:
    PATCH the server in place; a new address or port is checked at once."""
    name = args.new_name if args.action == "rename" else args.name
    if args.action == "rename" and not name:
        raise UsageError("servers rename: give the new name (berth servers rename ID NAME)")
    if name is None and args.address is None and args.ssh_port is None:
        raise UsageError("servers edit: give --name, --address or --ssh-port")
    answer = berth.change_server.response(
        args.server, name=name, address=args.address, ssh_port=args.ssh_port
    )
    s = answer.body
    out.write(
        f"{text(s.name)} ({s.id}): address {text(s.address or '-')}, SSH port {s.ssh_port}, "
        f"status {s.status}.\n"
    )
    return answer, 0


def _host_keys(args: argparse.Namespace) -> list[str]:
    """The host key lines of ``--key`` and ``--key-file``."""
    keys = list(args.key)
    for path in args.key_file:
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"cannot read {path}: {exc}") from None
        keys += [line.strip() for line in lines if line.strip()]
    return keys


def _add_server(berth: Client, args: argparse.Namespace, out: TextIO) -> Answer:
    if not args.server:
        raise UsageError("servers add: give the new server's name")
    keys = _host_keys(args)
    answer = berth.create_server.response(
        name=args.server,
        address=args.address,
        ssh_port=22 if args.ssh_port is None else args.ssh_port,
        host_keys=keys or None,
    )
    s = answer.body
    row = (s.id, s.name, s.status, s.address)
    out.write(render_table(("ID", "NAME", "STATUS", "ADDRESS"), [row]))
    if s.status == "pending":
        out.write(
            f"Run this on {text(s.name)}, as root or with sudo (valid once, until "
            f"{text(s.enrollment_expires_at)}):\n{text(s.install_command)}\n"
        )
    return answer, 0


def _repin(berth: Client, args: argparse.Namespace, out: TextIO) -> Answer:
    if not args.fingerprint:
        raise UsageError("servers repin: give --fingerprint (the offered key's, checked on it)")
    keys = _host_keys(args)
    if not keys:
        raise UsageError("servers repin: give the new host keys (--key or --key-file)")
    answer = berth.repin_host_keys.response(
        args.server, host_keys=keys, fingerprint=args.fingerprint
    )
    server = answer.body
    pinned = ", ".join(server.host_key_fingerprints)
    out.write(f"Pinned {text(pinned)} for {text(server.name)}; status {server.status}.\n")
    return answer, 0


def _installations(berth: Client, args: argparse.Namespace, out: TextIO) -> Answer:
    answer = berth.installations.response(args.server, include_removed=args.all)
    rows = [
        (i.id, i.name, i.image, _status(i), i.url, i.last_deployment and i.last_deployment.state)
        for i in answer.body.installations
    ]
    out.write(render_table(("ID", "NAME", "IMAGE", "STATUS", "URL", "LAST DEPLOY"), rows))
    return answer, 0


def _status(i: m.Installation) -> str:
    """``running``, ``exited (code 137)``, ``restarting (code 1, 4 restarts)``…"""
    notes = [f"code {i.exit_code}"] if i.exit_code is not None else []
    if i.restart_count:
        notes.append(f"{i.restart_count} restart{'s' if i.restart_count != 1 else ''}")
    return f"{i.status} ({', '.join(notes)})" if notes else i.status


def _port(p: m.Port) -> str:
    inside = f"{p.container_port}/{p.protocol}"
    if p.host_port is None:
        return inside
    return f"{p.host_ip or ''}:{p.host_port}->{inside}"


def _containers(berth: Client, args: argparse.Namespace, out: TextIO) -> Answer:
    answer = berth.containers.response(args.server)
    listing = answer.body
    out.write(f"server {listing.server_status}, observed {text(listing.observed_at)}\n")
    rows = [
        (
            c.id[:12],
            c.name,
            c.image,
            c.image_id and c.image_id.rpartition(":")[2][:12],  # as `docker images` shows it
            c.state,
            ", ".join(map(_port, c.ports)) or None,
            c.installation_id,
        )
        for c in listing.containers
    ]
    headers = ("ID", "NAME", "IMAGE", "IMAGE ID", "STATE", "PORTS", "INSTALLATION")
    out.write(render_table(headers, rows))
    return answer, 0


def _deploy(berth: Client, args: argparse.Namespace, out: TextIO) -> Answer:
    env: dict[str, str] = {}
    if args.env_file is not None:
        try:
            content = args.env_file.read_bytes().decode("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"--env-file {args.env_file}: {exc}") from exc
        env.update(parse_env_file(content, f"--env-file {args.env_file}"))
    env.update(parse_env_args(args.env))
    if (args.build is not None or args.git is not None) and args.wait is None:
        args.follow = True  # a build's output is what one waits for
    _wait_or_follow(args)
    memory = args.memory
    answer = berth.deploy.response(
        server_id=args.server,
        name=args.name,
        image=args.image,
        build=_build_request(berth, args, out),
        port=args.port,
        domain=args.domain,
        env=env or None,
        volumes=args.volume or None,
        # digits alone are bytes, as the API reads a number
        memory=int(memory) if memory is not None and memory.isdigit() else memory,
        cpus=args.cpus,
        restart=args.restart,
        health_path=args.health_path,
        command=args.argv,
        host_port=args.host_port,
        stop_grace_seconds=args.stop_grace,
        wait=args.wait or 0,
    )
    return _queued(berth, answer, args, out)


def _build_request(berth: Client, args: argparse.Namespace, out: TextIO) -> m.BuildRequest | None:
    """``--build DIR`` (uploaded first) or ``--git URL``, with their options; ``None``
    for ``--image``."""
    if args.build is None and args.git is None:
        for option in ("ref", "context", "dockerfile", "target", "build_arg"):
            if getattr(args, option):
                raise UsageError(f"--{option.replace('_', '-')} goes with --build or --git")
        return None
    if args.ref is not None and args.git is None:
        raise UsageError("--ref goes with --git")
    options: dict[str, Any] = {
        "context": args.context,
        "dockerfile": args.dockerfile,
        "args": parse_env_args(args.build_arg) or None,
        "target": args.target,
    }
    given = {k: v for k, v in options.items() if v is not None}
    if args.git is not None:
        return m.BuildRequest(git=m.GitRequest(url=args.git, ref=args.ref), **given)
    root: Path = args.build
    if not root.is_dir():
        raise UsageError(f"--build {root}: not a directory")
    packed = context_tar(root, args.dockerfile or "Dockerfile")
    try:
        size = packed.stat().st_size
        out.write(f"uploading {root} ({size / 1e6:.1f} MB)\n")
        with packed.open("rb") as body:
            source = berth.upload_source(iter(lambda: body.read(1 << 20), b""))
    finally:
        packed.unlink(missing_ok=True)
    return m.BuildRequest(source_id=source.id, **given)


def _rollback(berth: Client, args: argparse.Namespace, out: TextIO) -> Answer:
    answer = berth.rollback.response(
        args.installation_id, deployment_id=args.to, wait=args.wait or 0
    )
    return _queued(berth, answer, args, out)


def _wait_or_follow(args: argparse.Namespace) -> None:
    if getattr(args, "follow", False) and args.wait is not None:
        raise UsageError("give --wait or --follow, not both")


def _queued(
    berth: Client, answer: Response[m.Queued], args: argparse.Namespace, out: TextIO
) -> Answer:
    """A deploy's or a rollback's answer shown; the exit code says how it ended."""
    deployment, installation = answer.body.deployment, answer.body.installation
    row = (deployment.id, deployment.state, installation.id, installation.name, installation.url)
    out.write(render_table(("DEPLOYMENT", "STATE", "INSTALLATION", "NAME", "URL"), [row]))
    if deployment.error:
        out.write(f"error: {text(deployment.error)}\n")
    if getattr(args, "follow", False):
        return _follow(berth, args, out, str(deployment.id))
    if args.wait is None or deployment.state == "succeeded":
        return answer, 0
    return answer, EXIT_API_ERROR if deployment.state in FINAL_STATES else EXIT_STILL_RUNNING


def _follow(berth: Client, args: argparse.Namespace, out: TextIO, deployment_id: str) -> Answer:
    """Print the deployment's steps until it ends (``--json`` prints its final body);
    exit 0 if it succeeded, 1 if it ended otherwise."""
    state = None
    for item in berth.events(deployment_id):
        if isinstance(item, DeploymentEnd):
            state = item.state
            out.write(f"state: {state}\n")
        else:
            out.write(step_line(item))
        out.flush()
    answer = berth.deployment.response(deployment_id)
    return answer, 0 if state == "succeeded" else EXIT_API_ERROR


def _deployment(berth: Client, args: argparse.Namespace, out: TextIO) -> Answer:
    if args.follow:
        return _follow(berth, args, out, args.id)
    answer = berth.deployment.response(args.id)
    d = answer.body
    for label, value in (
        ("state", d.state),
        ("step", d.step),
        ("error", d.error),
        ("image", d.image),
        ("installation", d.installation_id),
        ("created", d.created_at),
        ("finished", d.finished_at),
    ):
        out.write(f"{label + ':':<14}{text(value or None)}\n")
    if d.events:
        out.write("events:\n")
        out.write(
            render_table(("AT", "STEP", "MESSAGE"), [(e.at, e.step, e.message) for e in d.events])
        )
    return answer, 0


def _cancel(berth: Client, args: argparse.Namespace, out: TextIO) -> Answer:
    answer = berth.cancel.response(args.id, wait=args.wait or 0)
    out.write(render_table(("DEPLOYMENT", "STATE"), [(answer.body.id, answer.body.state)]))
    return answer, 0


def _revisions(berth: Client, args: argparse.Namespace, out: TextIO) -> Answer:
    limit = 20 if args.limit is None else args.limit
    answer = berth.revisions.response(args.installation_id, limit=limit, before=args.before)
    page = answer.body
    rows = [(d.id, d.state, d.image, d.created_at, d.rollback_of) for d in page.deployments]
    out.write(render_table(("DEPLOYMENT", "STATE", "IMAGE", "CREATED", "ROLLBACK OF"), rows))
    if page.next_before:
        out.write(f"more: --before {page.next_before}\n")
    return answer, 0


def _change(berth: Client, args: argparse.Namespace, out: TextIO) -> Answer:
    action = {"stop": berth.stop, "start": berth.start, "restart": berth.restart}[args.command]
    answer = action.response(args.installation_id)
    i = answer.body
    out.write(render_table(("INSTALLATION", "NAME", "STATUS"), [(i.id, i.name, i.status)]))
    return answer, 0


def _remove(berth: Client, args: argparse.Namespace, out: TextIO) -> Answer:
    answer = berth.remove_installation.response(args.installation_id)
    out.write(
        f"removed {text(args.installation_id)}: its container and route are gone, its "
        "revisions stay readable (installations --all)\n"
    )
    return answer, 0


def _logs(berth: Client, args: argparse.Namespace, out: TextIO) -> Answer:
    tail = 100 if args.tail is None else args.tail
    if args.follow:
        if args.json:
            raise UsageError("--follow prints text lines; it has no --json")
        for line in berth.follow_logs(args.installation_id, tail=tail):
            out.write(printable(line) + "\n")
            out.flush()
        return None, 0
    answer = berth.logs.response(args.installation_id, tail=tail)
    out.writelines(printable(line) + "\n" for line in answer.body.lines)
    return answer, 0


def _stats(berth: Client, args: argparse.Namespace, out: TextIO) -> Answer:
    answer = berth.stats.response(args.installation_id)
    usage, stats = answer.body, answer.body.stats
    short = usage.container_id and usage.container_id[:12]  # as `docker ps` shows it
    if stats is None:
        out.write("no container (never deployed, or removed)\n")
    elif not stats.running:
        out.write(f"container {text(short)} is not running\n")
    else:
        cpu = None if stats.cpu_percent is None else f"{stats.cpu_percent:.1f} %"
        row = (short, cpu, size(stats.memory_bytes), size(stats.memory_limit_bytes))
        out.write(render_table(("CONTAINER", "CPU", "MEMORY", "LIMIT"), [row]))
    return answer, 0


def _disk(berth: Client, args: argparse.Namespace, out: TextIO) -> Answer:
    answer = berth.disk_usage.response(args.server_id)
    u = answer.body.usage
    rows = [
        ("images", u.images, size(u.images_bytes)),
        ("containers", u.containers, size(u.containers_bytes)),
        ("volumes", u.volumes, size(u.volumes_bytes)),
        ("build cache", None, size(u.build_cache_bytes)),
        ("total", None, size(u.total_bytes)),
    ]
    out.write(render_table(("WHAT", "COUNT", "SIZE"), rows))
    return answer, 0


def _registry_password(
    args: argparse.Namespace,
    environ: Mapping[str, str],
    stdin: TextIO,
    variable: str = "BERTH_REGISTRY_PASSWORD",
) -> str:
    """The password of ``registries add`` (``git-credentials add``: ``variable`` is
    ``BERTH_GIT_PASSWORD``): stdin, the environment, or a prompt; never argv."""
    if args.password_stdin:
        password = stdin.readline().rstrip("\r\n")
    elif environ.get(variable):
        password = environ[variable]
    elif stdin.isatty():
        password = getpass.getpass(f"Password for {args.username} at {args.host}: ")
    else:
        raise UsageError(
            f"no password: pass --password-stdin (and pipe it), set {variable}, "
            "or run in a terminal to be asked"
        )
    if not password:
        raise UsageError("the password is empty")
    return password


@dataclass(frozen=True, slots=True)
class _HostCredentials:
    """A kind of credentials saved per host (registries, Git hosts): the client's calls
    for it and the words the CLI says of it."""

    listed: Callable[[Client], Response[Any]]
    rows: str  # the listing's field that holds them
    add: Callable[..., Response[Any]]
    remove: Callable[[str], Response[Any]]
    variable: str  # the environment variable that may hold the password
    none_for: str  # "no … saved for host X"


def _registry_kind(berth: Client) -> _HostCredentials:
    return _HostCredentials(
        listed=lambda b: b.registries.response(),
        rows="registries",
        add=berth.add_registry.response,
        remove=berth.remove_registry.response,
        variable="BERTH_REGISTRY_PASSWORD",
        none_for="no registry saved for host",
    )


def _git_kind(berth: Client) -> _HostCredentials:
    return _HostCredentials(
        listed=lambda b: b.git_credentials.response(),
        rows="git_credentials",
        add=berth.add_git_credential.response,
        remove=berth.remove_git_credential.response,
        variable="BERTH_GIT_PASSWORD",
        none_for="no Git credentials saved for host",
    )


#: The client commands of credentials saved per host.
_CREDENTIALS: dict[str, Callable[[Client], _HostCredentials]] = {
    "registries": _registry_kind,
    "git-credentials": _git_kind,
}


def _host_credentials(
    berth: Client,
    kind: _HostCredentials,
    args: argparse.Namespace,
    out: TextIO,
    environ: Mapping[str, str],
    stdin: TextIO,
) -> Answer:
    """``registries`` and ``git-credentials``: list, add (the password never from argv),
    remove by id or by host."""
    if args.action == "remove":
        given = args.credential
        try:
            saved_id = str(UUID(given))
        except ValueError:  # a host
            rows = getattr(kind.listed(berth).body, kind.rows)
            ids = [str(r.id) for r in rows if r.host == given.lower()]
            if not ids:
                raise Refused(f"{kind.none_for} {given}") from None
            saved_id = ids[0]
        removed = kind.remove(saved_id)
        out.write(f"removed {given}\n")
        return removed, 0
    answer: Response[Any]
    if args.action == "add":
        password = _registry_password(args, environ, stdin, kind.variable)
        added = kind.add(host=args.host, username=args.username, password=password)
        answer, rows = added, [added.body]
    else:
        answer = kind.listed(berth)
        rows = getattr(answer.body, kind.rows)
    table = [(r.id, r.host, r.username, r.created_at) for r in rows]
    out.write(render_table(("ID", "HOST", "USERNAME", "ADDED"), table))
    return answer, 0


def _deploy_hook(berth: Client, args: argparse.Namespace, out: TextIO) -> Answer:
    installation_id = args.installation_id
    if args.action == "remove":
        removed = berth.remove_deploy_hook.response(installation_id)
        out.write(f"removed the deploy hook of {installation_id}\n")
        return removed, 0
    if args.action == "show":
        shown = berth.deploy_hook.response(installation_id)
        out.write(f"url     {shown.body.url}\n")
        return shown, 0
    created = berth.create_deploy_hook.response(installation_id)
    out.write(
        f"url     {created.body.url}\nsecret  {created.body.secret}\n"
        "Add the URL as a webhook of the repository (push events, content type "
        "application/json) with this secret; it is not shown again.\n"
    )
    return created, 0


def _webhooks(berth: Client, args: argparse.Namespace, out: TextIO) -> Answer:
    action = args.webhooks_action
    if action == "add":
        added = berth.create_webhook.response(
            url=args.webhook_url, events=args.events, format=args.format
        )
        w = added.body
        out.write(render_table(("WEBHOOK", "URL", "EVENTS", "FORMAT"), [_webhook_row(w)]))
        out.write(f"secret: {text(w.secret)}\n(shown once: keep it to check signatures)\n")
        return added, 0
    if action == "remove":
        removed = berth.delete_webhook.response(args.webhook_id)
        out.write(f"removed {args.webhook_id}\n")
        return removed, 0
    if action == "test":
        tested = berth.test_webhook.response(args.webhook_id)
        t = tested.body
        answer = f"HTTP {t.status_code}" if t.status_code is not None else "no answer"
        said = "delivered" if t.delivered else f"not delivered: {text(t.error or answer)}"
        out.write(f"{t.event} sent to {t.webhook_id}: {said}\n")
        return tested, 0 if t.delivered else 1
    if action == "deliveries":
        limit = 50 if args.limit is None else args.limit
        log = berth.webhook_deliveries.response(args.webhook_id, limit=limit)
        rows = []
        for d in log.body.deliveries:
            last = d.attempts[-1] if d.attempts else None
            rows.append(
                (
                    d.message_id,
                    d.event,
                    d.state,
                    len(d.attempts),
                    last and last.status_code,
                    last and last.error,
                    d.next_attempt_at,
                )
            )
        headers = ("MESSAGE", "EVENT", "STATE", "ATTEMPTS", "LAST STATUS", "ERROR", "NEXT")
        out.write(render_table(headers, rows))
        return log, 0
    listed = berth.webhooks.response()
    out.write(
        render_table(
            ("WEBHOOK", "URL", "EVENTS", "FORMAT"), map(_webhook_row, listed.body.webhooks)
        )
    )
    return listed, 0


def _webhook_row(w: m.Webhook) -> tuple[Any, ...]:
    return (w.id, w.url, ",".join(w.events), w.format)


def _teams(berth: Client, args: argparse.Namespace, out: TextIO) -> Answer:
    answer: Response[Any]
    if args.teams_action == "create":
        created = berth.create_team.response(name=args.name)
        answer, rows = created, [created.body]
    else:
        listed = berth.teams.response()
        answer, rows = listed, listed.body.teams
    table = [(t.id, t.name, t.role, "yes" if t.personal else "no", t.created_at) for t in rows]
    out.write(render_table(("TEAM", "NAME", "ROLE", "PERSONAL", "CREATED"), table))
    return answer, 0


def _member_rows(members: Iterable[m.Member]) -> list[tuple[Any, ...]]:
    return [(x.user_id, x.email, x.role, x.joined_at) for x in members]


_MEMBER_HEADERS = ("USER", "EMAIL", "ROLE", "JOINED")


def _members(berth: Client, args: argparse.Namespace, out: TextIO) -> Answer:
    action = args.members_action
    if action == "invite":
        invited = berth.invite.response(args.team, email=args.email, role=args.role)
        i = invited.body
        row = (i.id, i.email, i.role, i.expires_at)
        out.write(render_table(("INVITATION", "EMAIL", "ROLE", "EXPIRES"), [row]))
        out.write(f"url: {text(i.url)}\ntoken: {text(i.token)}\n")
        out.write("(shown once: send the link to them; it works once, signed in as that email)\n")
        return invited, 0
    if action == "remove":
        removed = berth.remove_member.response(args.team, args.user)
        out.write(f"removed {text(args.user)} from {text(args.team)}\n")
        return removed, 0
    if action == "set-role":
        changed = berth.change_role.response(args.team, args.user, role=args.role)
        out.write(render_table(_MEMBER_HEADERS, _member_rows([changed.body])))
        return changed, 0
    listed = berth.members.response(args.team)
    out.write(render_table(_MEMBER_HEADERS, _member_rows(listed.body.members)))
    return listed, 0


def _invitations(berth: Client, args: argparse.Namespace, out: TextIO) -> Answer:
    token = args.invitation
    if "/" in token:  # its link: the token is the last part of the path
        token = token.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]
    joined = berth.accept_invitation.response(token)
    member = joined.body
    out.write(f"joined team {text(member.team_id)} as {text(member.role)}\n")
    return joined, 0


def _moment(value: str, where: str) -> datetime:
    """An RFC 3339 time from argv (berth checks the rest: its zone, that it is ahead)."""
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        raise UsageError(f"{where}: expected an RFC 3339 time, e.g. 2027-01-31T00:00:00Z") from None


def _token_row(t: m.Token) -> tuple[Any, ...]:
    servers = None if t.server_ids is None else ",".join(map(str, t.server_ids))
    return (t.id, t.name, t.team_id, ",".join(t.scopes), servers, t.expires_at, t.last_used_at)


_TOKEN_HEADERS = ("TOKEN", "NAME", "TEAM", "SCOPES", "SERVERS", "EXPIRES", "LAST USED")


def _tokens(berth: Client, args: argparse.Namespace, out: TextIO) -> Answer:
    action = args.tokens_action
    if action == "create":
        created = berth.create_token.response(
            name=args.name,
            scopes=args.scopes,
            team_id=args.team,
            server_ids=args.servers,
            expires_at=None if args.expires is None else _moment(args.expires, "--expires"),
        )
        out.write(render_table(_TOKEN_HEADERS, [_token_row(created.body)]))
        out.write(f"token: {text(created.body.token)}\n")
        out.write("(shown once: keep it, e.g. as BERTH_TOKEN; berth keeps only its hash)\n")
        return created, 0
    if action == "revoke":
        revoked = berth.revoke_token.response(args.token_id)
        out.write(f"revoked {text(args.token_id)}\n")
        return revoked, 0
    if action in ("current", "whoami"):
        current = berth.whoami.response()
        c = current.body
        servers = None if c.server_ids is None else ", ".join(map(str, c.server_ids))
        for label, value in (
            ("user", f"{c.user.email} ({c.user.id})"),
            ("token", c.name if c.id is None else f"{c.name} ({c.id})"),
            ("team", c.team_id),
            ("role", c.role),
            ("scopes", ", ".join(c.scopes)),
            ("servers", servers or "all of the team's"),
            ("expires", c.expires_at or "never"),
        ):
            out.write(f"{label + ':':<9}{text(value)}\n")
        return current, 0
    listed = berth.tokens.response()
    out.write(render_table(_TOKEN_HEADERS, map(_token_row, listed.body.tokens)))
    return listed, 0


def _audit(berth: Client, args: argparse.Namespace, out: TextIO) -> Answer:
    limit = 50 if args.limit is None else args.limit
    answer = berth.audit.response(team_id=args.team, limit=limit, before=args.before)
    page = answer.body
    rows = [
        (
            e.id,
            e.at,
            e.action,
            f"{e.target.type} {e.target.name or e.target.id or ''}".strip(),
            e.actor.email,
            e.actor.token_name,
            e.outcome,
            e.client_address,
        )
        for e in page.events
    ]
    headers = ("EVENT", "AT", "ACTION", "TARGET", "ACTOR", "TOKEN", "OUTCOME", "ADDRESS")
    out.write(render_table(headers, rows))
    if page.next_before:
        out.write(f"more: --before {page.next_before}\n")
    return answer, 0


_COMMANDS: dict[str, Callable[[Client, argparse.Namespace, TextIO], Answer]] = {
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
    "remove": _remove,
    "stats": _stats,
    "disk": _disk,
    "webhooks": _webhooks,
    "deploy-hook": _deploy_hook,
    "teams": _teams,
    "members": _members,
    "invitations": _invitations,
    "tokens": _tokens,
    "audit": _audit,
}


def credentials(args: argparse.Namespace, environ: Mapping[str, str]) -> tuple[str, str]:
    """``--url``/``BERTH_URL`` (default ``DEFAULT_URL``) and ``--token``/``BERTH_TOKEN``;
    ``UsageError`` without a token or with a URL that is not http(s)."""
    url = getattr(args, "url", None) or environ.get("BERTH_URL") or DEFAULT_URL
    token = getattr(args, "token", None) or environ.get("BERTH_TOKEN")
    if not token:
        raise UsageError("no API token: set BERTH_TOKEN (or pass --token)")
    if not url.startswith(("http://", "https://")):
        raise UsageError(f"--url must start with http:// or https://, got {url!r}")
    return url, token


def run(
    args: argparse.Namespace,
    environ: Mapping[str, str] | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
    stdin: TextIO | None = None,
    transport: httpx.BaseTransport | None = None,
) -> int:
    """Run one client command; returns the exit code. ``transport`` stands in for the
    network (tests)."""
    environ = os.environ if environ is None else environ
    out = sys.stdout if out is None else out
    err = sys.stderr if err is None else err
    stdin = sys.stdin if stdin is None else stdin
    shown = io.StringIO() if args.json else out  # --json: the body alone, as received
    url = "?"
    try:
        url, token = credentials(args, environ)
        with Client(url, token, transport=transport) as berth:
            kind = _CREDENTIALS.get(args.command)
            if kind is not None:
                answer, code = _host_credentials(berth, kind(berth), args, shown, environ, stdin)
            else:
                answer, code = _COMMANDS[args.command](berth, args, shown)
    except UsageError as exc:
        err.write(f"berth: {exc}\n")
        return EXIT_USAGE
    except ApiError as exc:
        hint = f"\n  Check the API token (BERTH_TOKEN or --token) for {url}." * (exc.status == 401)
        err.write(f"berth: {render_problem(exc)}{hint}\n")
        return EXIT_API_ERROR
    except (BerthError, Refused) as exc:
        err.write(f"berth: {printable(str(exc))}\n")
        return EXIT_API_ERROR
    if args.json and answer is not None and answer.content:
        body = answer.content.decode("utf-8")
        out.write(body if body.endswith("\n") else body + "\n")
    return code
