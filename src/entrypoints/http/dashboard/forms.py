"""The dashboard's forms, turned into the core's commands by the core's own parsers.

A form is mapped onto the core's fields (``server_id``, ``name``, ``image``,
``port``, ``domain``, ``env``, ``volumes`` / ``name``, ``address``, ``ssh_port``,
``ssh_user``, ``host_keys``) and checked by ``parse_deploy`` / ``parse_create_server``:
the same rules and the same messages as the API, every broken rule at once. Each
error's field path (``port``, ``env.KEY``, ``volumes[2]``) is shown beside the field
it names.

Env values are write-only: a form never carries one back to the browser. A
redeploy form lists the installation's env keys with their values "unchanged";
such a key, submitted with an empty value, keeps its current value (the command's
``keep_env``).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from uuid import UUID

from berth.core.commands import (
    AddRegistry,
    CreateServerCommand,
    DeployCommand,
    parse_add_registry,
    parse_create_server,
    parse_deploy,
)
from berth.core.errors import FieldError, InvalidInput
from berth.core.models import DeploymentSpec, Installation

from .web import Form, FormRefused

__all__ = [
    "SERVER_FIELDS",
    "DeployForm",
    "EnvRow",
    "RegistryForm",
    "ServerForm",
    "parse_deploy_form",
    "parse_registry_form",
    "parse_server_form",
    "place_deploy_errors",
]

_VOLUME_LOC = re.compile(r"^volumes\[(\d+)\]$")
BLANK_ENV_ROWS = 2


@dataclass(slots=True)
class EnvRow:
    """One env variable row. ``value`` is what was typed; templates never render it."""

    key: str = ""
    value: str = ""
    keep: bool = False  # an existing variable whose value stays as it is unless retyped
    error: str | None = None


@dataclass(slots=True)
class _Shown:
    """A form shown again: what was typed (each subclass's fields; never a secret) and an
    error per field, ``"form"`` for one that names no field of the form."""

    errors: dict[str, str] = field(default_factory=dict)

    def place(self, errors: Iterable[FieldError], fields: Collection[str]) -> None:
        """Each error beside its field among ``fields`` (the first per field), else at the
        top of the form."""
        for error in errors:
            at = error.location if error.location in fields else "form"
            self.errors.setdefault(at, error.message)

    def used(self, fields: Collection[str]) -> bool:
        """Whether one of ``fields`` was filled in or is wrong: the section holding them
        then starts open."""
        return any(getattr(self, f) for f in fields) or any(f in self.errors for f in fields)


@dataclass(slots=True)
class DeployForm(_Shown):
    """What the deploy form shows: its values (env values excepted) and its errors."""

    name: str = ""
    image: str = ""
    port: str = ""
    domain: str = ""
    volumes: str = ""
    memory: str = ""
    cpus: str = ""
    restart: str = ""
    health_path: str = ""
    command: str = ""  # one argv word per line
    env: list[EnvRow] = field(default_factory=list)

    @property
    def advanced(self) -> bool:
        """Whether the options' section starts open."""
        return self.used(_OPTIONS)

    @classmethod
    def blank(cls) -> DeployForm:
        return cls(env=[EnvRow() for _ in range(BLANK_ENV_ROWS)])

    @classmethod
    def redeploy(cls, installation: Installation, spec: DeploymentSpec | None = None) -> DeployForm:
        """Prefilled with ``spec`` (default: the installation's last one); its env keys
        keep their values."""
        spec = spec or installation.spec
        return cls(
            name=installation.name,
            image=spec.image,
            port=str(spec.port),
            domain=spec.domain or "",
            volumes="\n".join(spec.volumes),
            memory=str(spec.memory) if spec.memory is not None else "",
            cpus=f"{spec.cpus:g}" if spec.cpus is not None else "",
            restart=spec.restart.value,
            health_path=spec.health_path or "",
            command="\n".join(spec.command or ()),
            env=[EnvRow(key=k, keep=True) for k in spec.env_keys] + [EnvRow()],
        )

    def with_blank_row(self) -> DeployForm:
        if not self.env or self.env[-1].key or self.env[-1].value:
            self.env.append(EnvRow())
        return self


_OPTIONS = ("memory", "cpus", "restart", "health_path", "command")
_DEPLOY_FIELDS = ("name", "image", "port", "domain", "env", "volumes", *_OPTIONS)


def _number(text: str) -> object:
    """A typed number as the API would see it (``0.5`` → 0.5), else the text."""
    try:
        return int(text) if text.isascii() and text.isdigit() else float(text)
    except ValueError:
        return text


def _port(text: str) -> object:
    """A typed port as the API would see it: an integer if it is one, else the text."""
    if text.isascii() and text.isdigit() and len(text) <= 10:
        return int(text)
    return text


def parse_deploy_form(server_id: UUID, form: Form) -> tuple[DeployForm, DeployCommand | None]:
    """The form's state, and the command (``None`` on errors); its ``keep_env`` names the
    variables left "unchanged"."""
    shown = DeployForm(
        name=form.get("name").strip(),
        image=form.get("image").strip(),
        port=form.get("port").strip(),
        domain=form.get("domain").strip(),
        volumes=form.get("volumes").replace("\r\n", "\n"),
        memory=form.get("memory").strip(),
        cpus=form.get("cpus").strip(),
        restart=form.get("restart").strip(),
        health_path=form.get("health_path").strip(),
        command=form.get("command").replace("\r\n", "\n"),
    )
    keys, values = form.getall("env_key"), form.getall("env_value")
    if len(keys) != len(values):
        raise FormRefused(400, "The form's environment rows are incomplete.")
    keepable = set(form.getall("env_keep"))
    env: dict[str, str] = {}
    keep: set[str] = set()
    for key, value in zip(keys, values, strict=True):
        row = EnvRow(key=key.strip(), value=value.replace("\r\n", "\n"))
        row.keep = row.key in keepable and row.value == ""
        if not row.key and not row.value:
            continue
        shown.env.append(row)
        if not row.key:
            row.error = "Give the variable a name."
        elif row.key in env:
            row.error = "This variable is set twice."
        else:
            env[row.key] = row.value
            if row.keep:
                keep.add(row.key)
    raw: dict[str, object] = {"server_id": str(server_id), "name": shown.name, "image": shown.image}
    if shown.port:
        raw["port"] = _port(shown.port)
    if shown.domain:
        raw["domain"] = shown.domain
    if env:
        raw["env"] = env
    volumes = [line.strip() for line in shown.volumes.split("\n") if line.strip()]
    if volumes:
        raw["volumes"] = volumes
    if shown.memory:
        raw["memory"] = int(shown.memory) if shown.memory.isdigit() else shown.memory
    if shown.cpus:
        raw["cpus"] = _number(shown.cpus)
    if shown.restart:
        raw["restart"] = shown.restart
    if shown.health_path:
        raw["health_path"] = shown.health_path
    argv = [line for line in shown.command.split("\n") if line.strip()]
    if argv:
        raw["command"] = argv
    command: DeployCommand | None = None
    try:
        command = parse_deploy(raw, keep_env=keep)
    except InvalidInput as exc:
        place_deploy_errors(shown, exc.errors)
    if any(row.error for row in shown.env):
        command = None
    shown.with_blank_row()
    return shown, command


def place_deploy_errors(shown: DeployForm, errors: tuple[FieldError, ...]) -> None:
    """Each of the core's errors beside its field of the deploy form: an env key's on its
    row, each volume's as a line of the Volumes field's message."""
    lines: list[str] = []  # one per volume line, all beside the Volumes field
    others: list[FieldError] = []
    for error in errors:
        loc = error.location
        if loc.startswith("env."):
            key = loc.removeprefix("env.")
            row = next((r for r in shown.env if r.key == key and r.error is None), None)
            if row is not None:
                row.error = error.message
            else:
                shown.errors.setdefault("env", f"{key}: {error.message}")
            continue
        match = _VOLUME_LOC.match(loc)
        if match:
            lines.append(f"Line {int(match[1]) + 1}: {error.message}")
            continue
        others.append(error)
    shown.place(others, _DEPLOY_FIELDS)
    if lines:
        shown.errors["volumes"] = " ".join(lines)
    if any(row.error for row in shown.env):
        shown.errors.setdefault("env", "Some variables need attention.")


@dataclass(slots=True)
class ServerForm(_Shown):
    """What the add-server form shows: its values and its errors."""

    name: str = ""
    address: str = ""
    ssh_port: str = ""
    ssh_user: str = ""
    host_keys: str = ""

    @property
    def advanced(self) -> bool:
        """Whether the SSH details' section starts open."""
        return self.used(_SSH_DETAILS)


_SSH_DETAILS = ("ssh_port", "ssh_user", "host_keys")
#: The add-server form's fields, by the core's names (where its errors are shown).
SERVER_FIELDS = ("name", "address", *_SSH_DETAILS)


def parse_server_form(form: Form) -> tuple[ServerForm, CreateServerCommand | None]:
    """The form's state and the create-server command (``None`` on errors)."""
    shown = ServerForm(
        name=form.get("name").strip(),
        address=form.get("address").strip(),
        ssh_port=form.get("ssh_port").strip(),
        ssh_user=form.get("ssh_user").strip(),
        host_keys=form.get("host_keys").replace("\r\n", "\n").strip(),
    )
    raw: dict[str, object] = {"name": shown.name}
    if shown.address:
        raw["address"] = shown.address
    if shown.ssh_port:
        raw["ssh_port"] = _port(shown.ssh_port)
    if shown.ssh_user:
        raw["ssh_user"] = shown.ssh_user
    keys = [line.strip() for line in shown.host_keys.split("\n") if line.strip()]
    if keys:
        raw["host_keys"] = keys
    try:
        return shown, parse_create_server(raw)
    except InvalidInput as exc:
        shown.place(exc.errors, SERVER_FIELDS)
        return shown, None


@dataclass(slots=True)
class RegistryForm(_Shown):
    """What the add-registry form shows: host and user name (never the password, which
    must be typed again after an error) and its errors."""

    host: str = ""
    username: str = ""


def parse_registry_form(form: Form) -> tuple[RegistryForm, AddRegistry | None]:
    """The form's state and the add-registry command (``None`` on errors)."""
    shown = RegistryForm(host=form.get("host").strip(), username=form.get("username").strip())
    raw = {"host": shown.host, "username": shown.username, "password": form.get("password")}
    try:
        return shown, parse_add_registry(raw)
    except InvalidInput as exc:
        shown.place(exc.errors, ("host", "username", "password"))
        return shown, None
