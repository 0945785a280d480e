"""The dashboard's forms: the Structs Litestar decodes each POSTed form into
(``data: URLEncodedBody[...]``: a field the form lacks is empty, one it has and the
Struct not, ``_csrf_token``, is ignored), shown again with their errors, and the core's
commands made of them by the core's own parsers.

A form is mapped onto the core's fields (``server_id``, ``name``, ``image`` or
``build``, ``port``, ``domain``, ``env``, ``volumes`` / ``name``, ``address``,
``ssh_port``, ``ssh_user``, ``host_keys``) and checked by ``parse_deploy`` /
``parse_create_server``: the same rules and the same messages as the API, every broken
rule at once. Each error's field path (``port``, ``env.KEY``, ``volumes[2]``,
``build.git.url``) is shown beside the field it names.

The deploy form's Source is an image or a Git repository (``build.git``, built on the
server); an uploaded directory is the CLI's (``berth deploy --build DIR``): a browser
form posts no archive.

Env values are write-only: a form never carries one back to the browser. A
redeploy form lists the installation's env keys with their values "unchanged";
such a key, submitted with an empty value, keeps its current value (the command's
``keep_env``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from typing import TypeVar
from uuid import UUID

import msgspec
from berth.core.commands import (
    AddGitCredential,
    AddRegistry,
    CreateServerCommand,
    CreateWebhook,
    DeployCommand,
    parse_add_git_credential,
    parse_add_registry,
    parse_create_server,
    parse_create_webhook,
    parse_deploy,
)
from berth.core.errors import FieldError, InvalidInput
from berth.core.models import BuildSpec, DeploymentSpec, GitSource, Installation
from berth.core.types import STOP_GRACE_DEFAULT
from berth.core.webhooks import without_user_info
from litestar.exceptions import HTTPException

__all__ = [
    "SERVER_FIELDS",
    "ActionForm",
    "ConfirmForm",
    "DeployForm",
    "EnvRow",
    "GitCredentialForm",
    "LoginForm",
    "RegistryForm",
    "RepinForm",
    "ServerEditForm",
    "ServerForm",
    "SignUpForm",
    "WebhookForm",
    "parse_deploy_form",
    "parse_git_credential_form",
    "parse_registry_form",
    "parse_server_form",
    "parse_webhook_form",
    "place_deploy_errors",
]

#: A field a form repeats (a list), sent once (a string) or not at all.
Many = list[str] | str

_VOLUME_LOC = re.compile(r"^volumes\[(\d+)\]$")
BLANK_ENV_ROWS = 2


class ConfirmForm(msgspec.Struct):
    """A destructive action's form: ``confirm=yes`` once the person confirmed it."""

    confirm: str = ""


class ActionForm(msgspec.Struct):
    """An app's action: ``from=app`` when posted from the app's own page."""

    source: str = msgspec.field(default="", name="from")


class LoginForm(msgspec.Struct):
    email: str = ""
    password: str = ""
    next: str = ""


class SignUpForm(msgspec.Struct):
    email: str = ""
    password: str = ""
    password_again: str = ""
    invite: str = ""
    next: str = ""


class ServerEditForm(msgspec.Struct):
    """A server's name, address and SSH port as typed (the port as text: the core's rule
    names a wrong one)."""

    name: str = ""
    address: str = ""
    ssh_port: str = ""


class RepinForm(msgspec.Struct):
    """A server's new host keys (a line each) and the fingerprint checked on the server."""

    host_keys: str = ""
    fingerprint: str = ""


@dataclass(slots=True)
class EnvRow:
    """One env variable row. ``value`` is what was typed; templates never render it."""

    key: str = ""
    value: str = ""
    keep: bool = False  # an existing variable whose value stays as it is unless retyped
    error: str | None = None


class _Shown(msgspec.Struct):
    """A form as posted and shown again: what was typed (each subclass's fields; never a
    secret) and an error per field, ``"form"`` for one that names no field of the form."""

    errors: dict[str, str] = {}

    def tidy(self, *names: str) -> None:
        """Each of ``names`` without surrounding blanks, with ``\\n`` line ends."""
        for name in names:
            setattr(self, name, getattr(self, name).replace("\r\n", "\n").strip())

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


class DeployForm(_Shown):
    """The deploy form: its values (env values excepted, never shown), its env rows
    (posted as the repeated ``env_key`` and ``env_value``; ``env_keep`` names a row left
    "unchanged") and its errors."""

    name: str = ""
    image: str = ""
    port: str = ""
    host_port: str = ""  # empty: the port itself
    domain: str = ""
    volumes: str = ""
    memory: str = ""
    cpus: str = ""
    restart: str = ""
    health_path: str = ""
    command: str = ""  # one argv word per line
    stop_grace_seconds: str = ""
    source_type: str = "image"  # "image", or "git": built on the server from a repository
    git_url: str = ""
    git_ref: str = ""  # empty: the repository's default branch
    build_context: str = ""  # empty: the repository's root
    build_dockerfile: str = ""  # empty: Dockerfile
    build_target: str = ""
    build_args: str = ""  # one NAME=value per line
    env_key: Many = []
    env_value: Many = []
    env_keep: Many = []
    env: list[EnvRow] = []  # the rows shown
    source: str = msgspec.field(default="", name="from")  # "app": a Redeploy from its page
    #: A redeploy of an app built from an uploaded directory: its image is offered.
    uploaded: bool = False

    @property
    def advanced(self) -> bool:
        """Whether the options' section starts open."""
        return self.used(_OPTIONS)

    @property
    def git(self) -> bool:
        """Whether the source chosen is a Git repository (else an image)."""
        return self.source_type == "git"

    @classmethod
    def blank(cls) -> DeployForm:
        return cls(env=[EnvRow() for _ in range(BLANK_ENV_ROWS)])

    @classmethod
    def redeploy(cls, installation: Installation, spec: DeploymentSpec | None = None) -> DeployForm:
        """Prefilled with ``spec`` (default: the installation's last one); its env keys
        keep their values."""
        spec = spec or installation.spec
        shown = cls(
            name=installation.name,
            image=spec.image,
            uploaded=spec.build is not None and spec.build.git is None,
            port=str(spec.port),
            host_port=(
                str(spec.host_port)
                if spec.host_port is not None and spec.host_port != spec.port
                else ""
            ),
            domain=spec.domain or "",
            volumes="\n".join(spec.volumes),
            memory=str(spec.memory) if spec.memory is not None else "",
            cpus=f"{spec.cpus:g}" if spec.cpus is not None else "",
            restart=spec.restart.value,
            health_path=spec.health_path or "",
            command="\n".join(spec.command or ()),
            stop_grace_seconds=(
                str(spec.stop_grace_seconds)
                if spec.stop_grace_seconds != STOP_GRACE_DEFAULT
                else ""
            ),
            env=[EnvRow(key=k, keep=True) for k in spec.env_keys] + [EnvRow()],
            source="app",
        )
        if spec.build is not None and spec.build.git is not None:
            shown.show_git(spec.build, spec.build.git)
        return shown

    def show_git(self, build: BuildSpec, git: GitSource) -> None:
        """Source Git, with ``build``'s fields (a default, the root or ``Dockerfile``, as
        empty); the image its build made is not offered."""
        self.source_type, self.image = "git", ""
        self.git_url, self.git_ref = git.url, git.ref or ""
        self.build_context = "" if build.context == "." else build.context
        self.build_dockerfile = "" if build.dockerfile == "Dockerfile" else build.dockerfile
        self.build_target = build.target or ""
        self.build_args = "\n".join(f"{key}={value}" for key, value in build.args.items())

    def with_blank_row(self) -> DeployForm:
        if not self.env or self.env[-1].key or self.env[-1].value:
            self.env.append(EnvRow())
        return self


_OPTIONS = ("memory", "cpus", "restart", "health_path", "command", "stop_grace_seconds")
_GIT_FIELDS = (
    "git_url",
    "git_ref",
    "build_context",
    "build_dockerfile",
    "build_target",
    "build_args",
)
_DEPLOY_FIELDS = (
    "name",
    "image",
    *_GIT_FIELDS,
    "port",
    "host_port",
    "domain",
    "env",
    "volumes",
    *_OPTIONS,
)
#: The core's locations of a build's errors → the form's fields (``build.args.KEY`` →
#: ``build_args``, with the name).
_BUILD_LOCATIONS = {
    "build": "git_url",
    "build.git": "git_url",
    "build.git.url": "git_url",
    "build.git.ref": "git_ref",
    "build.context": "build_context",
    "build.dockerfile": "build_dockerfile",
    "build.target": "build_target",
    "build.args": "build_args",
}


def _build_of(form: DeployForm) -> dict[str, object]:
    """The Git fields as the API's ``build`` (each one filled in); the build arguments'
    lines that are no ``NAME=value``, or repeat a name, are errors of ``build_args``."""
    args: dict[str, str] = {}
    wrong: list[str] = []
    for number, line in enumerate(form.build_args.split("\n"), start=1):
        if not line.strip():
            continue
        key, equals, value = line.partition("=")
        key = key.strip()
        if not equals or not key:
            wrong.append(f"Line {number}: write it as NAME=value.")
        elif key in args:
            wrong.append(f"Line {number}: {key} is set twice.")
        else:
            args[key] = value
    if wrong:
        form.errors["build_args"] = " ".join(wrong)
    git = {"url": form.git_url, **_given(ref=form.git_ref)}
    return {
        "git": git,
        **_given(
            context=form.build_context,
            dockerfile=form.build_dockerfile,
            target=form.build_target,
            args=args,
        ),
    }


def _many(value: Many) -> list[str]:
    return [value] if isinstance(value, str) else value


def _lines(text: str) -> list[str]:
    return [line.strip() for line in text.split("\n") if line.strip()]


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


def _given(**fields: object) -> dict[str, object]:
    """The fields filled in, as the API's JSON body would have them."""
    return {name: value for name, value in fields.items() if value not in ("", [], {})}


def parse_deploy_form(server_id: UUID, form: DeployForm) -> tuple[DeployForm, DeployCommand | None]:
    """The form to show again, and the command (``None`` on errors); its ``keep_env``
    names the variables left "unchanged"."""
    form.tidy(
        "name",
        "image",
        "source_type",
        "git_url",
        "git_ref",
        "build_context",
        "build_dockerfile",
        "build_target",
        "port",
        "host_port",
        "domain",
        "memory",
        "cpus",
        "restart",
        "health_path",
        "stop_grace_seconds",
    )
    if form.source_type not in ("image", "git", ""):
        raise HTTPException(status_code=400, detail="The form's source is image or git.")
    form.source_type = form.source_type or "image"
    form.volumes, form.command, form.build_args = (
        f.replace("\r\n", "\n") for f in (form.volumes, form.command, form.build_args)
    )
    keys, values = _many(form.env_key), _many(form.env_value)
    if len(keys) != len(values):
        raise HTTPException(status_code=400, detail="The form's environment rows are incomplete.")
    keepable = set(_many(form.env_keep))
    env: dict[str, str] = {}
    keep: set[str] = set()
    for key, value in zip(keys, values, strict=True):
        row = EnvRow(key=key.strip(), value=value.replace("\r\n", "\n"))
        row.keep = row.key in keepable and row.value == ""
        if not row.key and not row.value:
            continue
        form.env.append(row)
        if not row.key:
            row.error = "Give the variable a name."
        elif row.key in env:
            row.error = "This variable is set twice."
        else:
            env[row.key] = row.value
            if row.keep:
                keep.add(row.key)
    raw = _given(
        port=_port(form.port),
        host_port=_port(form.host_port),
        domain=form.domain,
        env=env,
        volumes=_lines(form.volumes),
        memory=int(form.memory) if form.memory.isdigit() else form.memory,
        cpus=_number(form.cpus),
        restart=form.restart,
        health_path=form.health_path,
        command=[line for line in form.command.split("\n") if line.strip()],
        stop_grace_seconds=_port(form.stop_grace_seconds),
    )
    source = {"build": _build_of(form)} if form.git else {"image": form.image}
    command: DeployCommand | None = None
    try:
        given = {"server_id": str(server_id), "name": form.name, **source, **raw}
        command = parse_deploy(given, keep_env=keep)
    except InvalidInput as exc:
        place_deploy_errors(form, exc.errors)
    if any(row.error for row in form.env) or "build_args" in form.errors:
        command = None
    if command is None:
        form.git_url = str(without_user_info(form.git_url, mark=""))
    form.with_blank_row()
    return form, command


def place_deploy_errors(shown: DeployForm, errors: tuple[FieldError, ...]) -> None:
    """Each of the core's errors beside its field of the deploy form: an env key's on its
    row, each volume's as a line of the Volumes field's message, a build's beside its Git
    field (a build argument's with its name)."""
    lines: list[str] = []  # one per volume line, all beside the Volumes field
    others: list[FieldError] = []
    for error in errors:
        loc = error.location
        if loc.startswith("build.args."):
            key = loc.removeprefix("build.args.")
            said = shown.errors.get("build_args")
            shown.errors["build_args"] = " ".join(filter(None, (said, f"{key}: {error.message}")))
            continue
        if loc in _BUILD_LOCATIONS:
            shown.errors.setdefault(_BUILD_LOCATIONS[loc], error.message)
            continue
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


class ServerForm(_Shown):
    """The add-server form: its values and its errors."""

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


def parse_server_form(form: ServerForm) -> tuple[ServerForm, CreateServerCommand | None]:
    """The form to show again and the create-server command (``None`` on errors)."""
    form.tidy("name", "address", "ssh_port", "ssh_user", "host_keys")
    raw = _given(
        address=form.address,
        ssh_port=_port(form.ssh_port),
        ssh_user=form.ssh_user,
        host_keys=_lines(form.host_keys),
    )
    try:
        return form, parse_create_server({"name": form.name, **raw})
    except InvalidInput as exc:
        form.place(exc.errors, SERVER_FIELDS)
        return form, None


class WebhookForm(_Shown):
    """The add-notification form: where to (``url``), how it reads (``format``) and the
    events ticked (the repeated ``event``)."""

    url: str = ""
    format: str = "standard"
    event: Many = []

    @property
    def events(self) -> list[str]:
        return _many(self.event)


def parse_webhook_form(form: WebhookForm) -> tuple[WebhookForm, CreateWebhook | None]:
    """The form to show again and the create-webhook command (``None`` on errors)."""
    form.tidy("url", "format")
    raw = {"url": form.url, "events": form.events, "format": form.format}
    try:
        return form, parse_create_webhook(raw)
    except InvalidInput as exc:
        form.place(exc.errors, ("url", "events", "format"))
        return form, None


class RegistryForm(_Shown):
    """The add-registry form: host, user name and password (never shown: it must be
    typed again after an error) and its errors."""

    host: str = ""
    username: str = ""
    password: str = ""


def parse_registry_form(form: RegistryForm) -> tuple[RegistryForm, AddRegistry | None]:
    """The form to show again and the add-registry command (``None`` on errors)."""
    return form, _parse_host_form(form, "", parse_add_registry)


class GitCredentialForm(_Shown):
    """The add-Git-credentials form (its own field names: it shares the page with the
    registry form): host, user name and password (never shown again) and its errors."""

    git_host: str = ""
    git_username: str = ""
    git_password: str = ""


def parse_git_credential_form(
    form: GitCredentialForm,
) -> tuple[GitCredentialForm, AddGitCredential | None]:
    """The form to show again and the add-Git-credentials command (``None`` on errors)."""
    return form, _parse_host_form(form, "git_", parse_add_git_credential)


_Added = TypeVar("_Added")


def _parse_host_form(
    form: _Shown, prefix: str, parse: Callable[[dict[str, str]], _Added]
) -> _Added | None:
    """The command of a form of credentials for a host (its fields ``host``, ``username``
    and ``password`` after ``prefix``), ``None`` with the form's errors placed; the
    password is blanked either way (never shown again)."""
    fields = (f"{prefix}host", f"{prefix}username", f"{prefix}password")
    form.tidy(*fields[:2])
    raw = {name: getattr(form, f"{prefix}{name}") for name in ("host", "username", "password")}
    setattr(form, fields[2], "")
    try:
        return parse(raw)
    except InvalidInput as exc:
        named = [FieldError(f"{prefix}{e.location}", e.message, e.value) for e in exc.errors]
        form.place(named, fields)
        return None
