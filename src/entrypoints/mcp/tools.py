"""berth's MCP tools, defined once: names, descriptions, input schemas, annotations.

Two servers expose them, each with a ``Backend``: the one mounted in the HTTP app at
``/mcp`` (the library facade as the token's user, see ``mounted.py``) and ``berth mcp``
over stdio (``berth.client.AsyncClient`` itself: the methods have the same names and
arguments). A tool checks nothing itself: its arguments go to the backend, which puts
them through the core's parsers (the facade's or the API's), so every rule of the API
applies and every broken one is reported at once. Results are the API's JSON bodies
(camelCase, env keys only, never env values) with a ``next`` line telling the agent what
it can do next; errors, the core's or the API's, read the same (``failure_text``).

Input schemas show the API's constraints, read from the ``Annotated`` aliases of
``core/types.py``; they are advertised (``WithJsonSchema``, no unknown argument allowed)
but not enforced by the SDK: ``arguments.checked`` refuses unknown arguments and wrong
types in berth's words first, then the core's parsers name every broken rule.

``deploy``, ``rollback`` and ``get_deployment`` with ``wait`` follow the deployment's
events, each one a ``notifications/progress`` when the client sent a progress token,
and answer within ``CALL_WAIT_MAX`` seconds (below the 60 s after which clients give up
on a request): a deployment still running then is answered as it is, with a ``next``
saying how to go on waiting.

Each tool needs the right of the core command it sends (``TOOL_RIGHTS``); ``tools/list``
offers a caller only the tools its effective rights allow (``OfferedTools``, from the
backend's ``whoami``: the API's ``GET /api/agent/tokens/current``). A hidden tool called
anyway goes to the backend like any other and is refused there, as the API refuses it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from importlib.metadata import PackageNotFoundError, version
from typing import Annotated, Any, Protocol, TypeVar, get_args

import anyio
import msgspec
from berth.client import ApiError, BerthError, Unreachable
from berth.client.models import RestartPolicy
from berth.core import commands as c
from berth.core import types as t
from berth.core.access import Right, Role, TokenScope, rights_of
from berth.core.commands import DEFAULT_PORT, PAGE_MAX, TAIL_MAX, WAIT_MAX
from berth.core.errors import CoreError, InvalidInput, RateLimited
from berth.core.models import InstallationStatus
from berth.core.types import STOP_GRACE_DEFAULT, STOP_GRACE_MAX
from mcp.server import MCPServer
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools import Tool
from mcp.shared.exceptions import MCPError
from mcp.types import METHOD_NOT_FOUND, ToolAnnotations
from pydantic import Field, WithJsonSchema

from .arguments import checked

__all__ = [
    "TOOL_NAMES",
    "TOOL_RIGHTS",
    "Backend",
    "OfferedTools",
    "ToolFailure",
    "build_server",
    "failure_text",
]

INSTRUCTIONS = (
    "berth deploys Docker apps to the user's own servers. Start with list_servers to "
    "get a server id, then deploy (with wait=50 to see it through), get_deployment, logs, "
    "list_installations. Ids are UUIDs; an id that is not the user's is 'not found'. "
    "whoami says whose token this is, its team, role and scopes: the tools listed are "
    "the ones it may call."
)


#: The longest one tool call waits for a deployment, in seconds: below the 60 s after
#: which MCP clients (the TypeScript SDK's default) give up on a request.
CALL_WAIT_MAX = 50


class ToolFailure(ToolError):
    """A tool call the agent can fix or retry: the text says what and how."""


Body = msgspec.Struct  # an API body: the client's Struct, or the API's own rendering


class Backend(Protocol):
    """What the tools need: the methods ``berth.client.AsyncClient`` and the library
    facade (``berth.Berth``, as one user) share, returning the API's bodies. Raises
    ``CoreError`` (the facade) or ``BerthError`` (the client)."""

    async def servers(
        self,
        *,
        status: Any = None,
        name: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> Body: ...
    async def installations(
        self,
        server_id: str,
        *,
        include_removed: bool = False,
        status: Any = None,
        name: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> Body: ...
    async def containers(self, server_id: str) -> Body: ...
    async def deploy(
        self,
        *,
        server_id: str,
        name: str,
        image: str | None = None,
        build: Any = None,
        port: int | None = None,
        domain: str | None = None,
        env: Any = None,
        volumes: Sequence[str] | None = None,
        memory: int | str | None = None,
        cpus: float | None = None,
        restart: RestartPolicy | None = None,
        health_path: str | None = None,
        command: Sequence[str] | None = None,
        host_port: int | None = None,
        stop_grace_seconds: int | None = None,
        idempotency_key: str | None = None,
    ) -> Body: ...
    async def deployment(self, deployment_id: str) -> Body: ...
    def events(self, deployment_id: str) -> AsyncIterator[Body]: ...
    async def installation(self, installation_id: str) -> Body: ...
    async def revisions(
        self, installation_id: str, *, limit: int = 20, before: str | None = None
    ) -> Body: ...
    async def logs(self, installation_id: str, *, tail: int = 100) -> Body: ...
    async def stats(self, installation_id: str) -> Body: ...
    async def disk_usage(self, server_id: str) -> Body: ...
    async def change_server(
        self,
        server_id: str,
        *,
        name: str | None = None,
        address: str | None = None,
        ssh_port: int | None = None,
    ) -> Body: ...
    async def rollback(
        self,
        installation_id: str,
        *,
        deployment_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> Body: ...
    async def cancel(self, deployment_id: str, *, wait: int = 0) -> Body: ...
    async def stop(self, installation_id: str) -> Body: ...
    async def start(self, installation_id: str) -> Body: ...
    async def restart(self, installation_id: str) -> Body: ...
    async def remove_installation(self, installation_id: str) -> None: ...
    async def whoami(self) -> Body: ...


# --- input schemas from the core's aliases ---------------------------------------------

_META_KEYWORDS = {
    "ge": "minimum",
    "le": "maximum",
    "gt": "exclusiveMinimum",
    "lt": "exclusiveMaximum",
    "pattern": "pattern",
    "min_length": "minLength",
    "max_length": "maxLength",
    "description": "description",
    "examples": "examples",
}


def rules_of(alias: Any) -> dict[str, Any]:
    """The JSON Schema keywords of a ``core.types`` alias's ``msgspec.Meta``."""
    keywords: dict[str, Any] = {}
    for meta in get_args(alias)[1:]:
        if isinstance(meta, msgspec.Meta):
            for attr, keyword in _META_KEYWORDS.items():
                value = getattr(meta, attr, None)
                if value is not None:
                    keywords[keyword] = list(value) if keyword == "examples" else value
    return keywords


def _schema(json_type: str, alias: Any = None, **more: Any) -> WithJsonSchema:
    return WithJsonSchema({"type": json_type, **(rules_of(alias) if alias else {}), **more})


def _strings(alias: Any, most: int, example: list[str]) -> WithJsonSchema:
    """A list of at most ``most`` strings, each with the rules of ``alias``."""
    items = {"type": "string", **rules_of(alias)}
    return _schema("array", items=items, maxItems=most, examples=[example])


_ID = {"type": "string", "format": "uuid", "pattern": t.UUID_PATTERN}
ServerId = Annotated[
    Any, WithJsonSchema(_ID), Field(description="A server's id (from list_servers).")
]
InstallationId = Annotated[
    Any,
    WithJsonSchema(_ID),
    Field(description="An installation's id (deploy's or list_installations' `installation.id`)."),
]
DeploymentId = Annotated[
    Any, WithJsonSchema(_ID), Field(description="A deployment's id (deploy's `deployment.id`).")
]
Limit = Annotated[
    Any, _schema("integer", minimum=1, maximum=PAGE_MAX), Field(description="How many, 1-100.")
]
Lines = Annotated[
    Any, _schema("integer", minimum=1, maximum=TAIL_MAX), Field(description="Lines, 1-5000.")
]
#: A list tool's page: at most ``LIST_PAGE`` entries unless asked otherwise, so one call's
#: answer stays small; ``nextCursor`` continues.
LIST_PAGE = 50
PageArg = Annotated[
    Any,
    _schema("integer", minimum=1, maximum=PAGE_MAX),
    Field(description=f"Entries per page, 1-{PAGE_MAX} (default {LIST_PAGE})."),
]
CursorArg = Annotated[
    Any,
    WithJsonSchema({**_ID, "examples": ["5b0c3a4e-8f1d-4c2a-9e57-0d6b1f2a3c4d"]}),
    Field(description="The previous page's `nextCursor`; none for the first page."),
]
NameFilter = Annotated[
    Any,
    _schema("string", minLength=1, maxLength=100, examples=["web"]),
    Field(description="Only those whose name holds this text (any case)."),
]
ServerStatusFilter = Annotated[
    Any,
    _schema(
        "string",
        enum=["pending", "online", "offline", "host_key_mismatch", "removed", "checking"],
    ),
    Field(description="Only the servers in this status."),
]
AppStatusFilter = Annotated[
    Any,
    _schema("string", enum=[status.value for status in InstallationStatus]),
    Field(description="Only the installations in this status."),
]
BeforeArg = Annotated[
    Any,
    WithJsonSchema({**_ID, "examples": ["1f2e3d4c-5b6a-4789-8a0b-c1d2e3f4a5b6"]}),
    Field(description="The previous page's `nextBefore`: only older deployments."),
]
Wait = Annotated[
    Any,
    _schema("integer", minimum=0, maximum=WAIT_MAX),
    Field(
        description=f"Seconds to wait for the deployment to end (0-{WAIT_MAX}; 0 returns at "
        f"once). One call waits {CALL_WAIT_MAX} s at most, reporting each step as progress; "
        "if the deployment has not ended by then, the answer says so and get_deployment "
        "with wait goes on waiting."
    ),
]
Flag = Annotated[Any, _schema("boolean")]

IdempotencyKeyArg = Annotated[
    Any,
    _schema(
        "string",
        minLength=1,
        maxLength=t.IDEMPOTENCY_KEY_MAX,
        pattern="^[!-~]+$",
        examples=["deploy-shop-2026-11-25T10:00"],
    ),
    Field(
        description="Any string of yours (1-255 printable ASCII characters, no spaces) naming "
        "this request: calling again with the same key and the same arguments returns the "
        "first call's deployment instead of queuing another; the same key with other "
        "arguments is an error. Use one when a call may be retried."
    ),
]

_NAME_RULE = (
    "The app's name, 1-100 characters. Its container is named after it, sanitized "
    "(lowercased; characters other than a-z, 0-9, `_`, `.` and `-` become `-`; leading "
    "and trailing `-._` trimmed), which must keep 2+ usable characters. Deploying the "
    "same name on the same server again updates that app (a new revision); the old "
    "container runs until the new one is healthy."
)
AppNameArg = Annotated[
    Any,
    _schema("string", minLength=1, maxLength=100, examples=["shop", "blog-api"]),
    Field(description=_NAME_RULE),
]
ImageArg = Annotated[
    Any,
    _schema("string", t.ImageRef, examples=["nginx:1.27", "ghcr.io/acme/shop:2.1.0"]),
    Field(
        description="`<repository>:<tag>` (the tag is required, `latest` is not implied), "
        "optionally `@sha256:<digest>`. Pulled on the server unless already there. Give "
        "either `image` or `build`."
    ),
]
_GIT = {
    "type": "object",
    "properties": {
        "url": {"type": "string", "examples": ["https://git.example.com/acme/shop.git"]},
        "ref": {"type": "string", "examples": ["main"]},
    },
    "required": ["url"],
    "additionalProperties": False,
}
BuildArg = Annotated[
    Any,
    WithJsonSchema(
        {
            "type": "object",
            "properties": {
                "git": _GIT,
                "context": {"type": "string", "examples": ["."]},
                "dockerfile": {"type": "string", "examples": ["Dockerfile"]},
                "args": {"type": "object", "additionalProperties": {"type": "string"}},
                "target": {"type": "string"},
            },
            "required": ["git"],
            "additionalProperties": False,
        }
    ),
    Field(
        description="Instead of `image`: build the image on the server from a Git repository "
        "(`git.url`, `git.ref`: a branch, tag or commit; default the default branch), with "
        "`context` (a subdirectory), `dockerfile`, `args` (build arguments) and `target`. "
        "The images its Dockerfile starts FROM must be on the server (no pull)."
    ),
]
PortArg = Annotated[
    Any,
    _schema("integer", t.Port, examples=[8080]),
    Field(
        description=f"The TCP port the app listens on inside the container (default "
        f"{DEFAULT_PORT}). Without a domain it is published on the server's host port "
        "host_port (by default this same port), which must be free there; with a domain "
        "berth's proxy reaches it instead."
    ),
]
HostPortArg = Annotated[
    int | None,
    _schema("integer", t.Port, examples=[8080]),
    Field(
        description="Without a domain: the server's host port that publishes `port` "
        "(default: `port` itself); it must be free there. Not with a domain."
    ),
]
StopGraceArg = Annotated[
    int | None,
    _schema("integer", minimum=0, maximum=STOP_GRACE_MAX, examples=[10]),
    Field(
        description="Seconds a stop, restart or redeploy waits for the app to exit after "
        f"SIGTERM before it is killed, 0-{STOP_GRACE_MAX} (default {STOP_GRACE_DEFAULT})."
    ),
]
DomainArg = Annotated[
    Any,
    _schema("string", t.Domain, examples=["shop.example.com"]),
    Field(
        description="Serve the app at https://<domain> through berth's proxy (a DNS name "
        "with 2+ labels pointing at the server). Omit to publish `port` on the host."
    ),
]
# Every argument is ``Any`` to the SDK: ``arguments.checked`` checks them first, in
# berth's words (and env values are secret: no error quotes one).
EnvArg = Annotated[
    Any,
    _schema(
        "object",
        propertyNames=rules_of(t.EnvKey),
        additionalProperties={"type": "string", **rules_of(t.EnvValue)},
        maxProperties=t.ENV_MAX_KEYS,
        examples=[{"PORT": "8080", "LOG_LEVEL": "info"}],
    ),
    Field(
        description="Environment variables, values byte for byte (no quoting, no `$` "
        "expansion). Keys match `^[A-Za-z_][A-Za-z0-9_]*$`. Values are stored encrypted and "
        "never shown again: results list only env keys."
    ),
]
VolumesArg = Annotated[
    Any,
    _strings(t.Volume, t.VOLUMES_MAX, ["data:/var/lib/app", "/srv/shop/uploads:/uploads:ro"]),
    Field(
        description="Bind mounts `<host_path>:<container_path>[:ro|:rw]`. A relative host "
        "path lives under the app's data directory on the server; an absolute one is used "
        "as is, except system paths (`/etc`, `/proc`, `/run`, `/var/lib/docker`, Docker's "
        "socket ...) and, on berth's own machine, berth's data dir. Each container path once."
    ),
]
MemoryArg = Annotated[
    Any,
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "integer", "minimum": 6 * 1024 * 1024},
                {"type": "string", "pattern": r"^[0-9]{1,16}[bkmgBKMG]$"},
            ],
            "examples": ["512m", "2g"],
        }
    ),
    Field(description="Memory limit: bytes (at least 6 MiB) or a string such as `512m`, `2g`."),
]
CpusArg = Annotated[Any, _schema("number", t.Cpus), Field(description="CPUs, 0.01-1024.")]
RestartArg = Annotated[
    Any,
    WithJsonSchema({"type": "string", "enum": ["unless-stopped", "always", "on-failure", "no"]}),
    Field(description="Docker's restart policy (default `unless-stopped`)."),
]
HealthPathArg = Annotated[
    Any,
    _schema("string", t.HealthPath),
    Field(
        description="An HTTP path that must answer 2xx/3xx for the app to count as healthy "
        "(default: the port accepting connections)."
    ),
]
CommandArgs = Annotated[
    Any,
    _strings(t.CommandArg, 100, ["serve", "--port", "8080"]),
    Field(description="The container's command (argv, no shell), replacing the image's CMD."),
]


# --- results and errors -----------------------------------------------------------------


def failure_text(exc: CoreError | BerthError) -> str:
    """An error as the agent reads it, the same from either backend: its kind and
    detail, or every invalid argument by the tool's name for it (``health_path``,
    ``env.MY_KEY``), one a line; the argument a conflict is about; when to retry."""
    if isinstance(exc, Unreachable):
        return f"unreachable: {exc}. Check BERTH_URL and try again."
    if isinstance(exc, CoreError):
        kind, detail, field = exc.kind, exc.detail, exc.field
        invalid = []
        if isinstance(exc, InvalidInput):
            invalid = [(e.location or "arguments", e.message) for e in exc.errors]
        retry_after = exc.retry_after if isinstance(exc, RateLimited) else None
    elif isinstance(exc, ApiError):
        kind, detail, retry_after = exc.kind, exc.detail or exc.title, exc.retry_after
        arguments = [(e.argument, e.message) for e in exc.errors]
        invalid = arguments if exc.status == 422 else []
        field = None if invalid or not arguments else arguments[0][0]
    else:
        return f"unexpected-answer: {exc}"
    if invalid:
        lines = [f"{kind}: {len(invalid)} invalid argument(s); fix each and call again:"]
        lines += [f"- {where}: {message}" for where, message in invalid]
        return "\n".join(lines)
    text = f"{kind}: {detail}"
    if field:
        text += f" (argument `{field}`)"
    if retry_after is not None:
        text += f" Retry after {retry_after} seconds."
    if isinstance(exc, ApiError) and exc.status == 401:
        text += " Check BERTH_TOKEN (Settings → API Token) and BERTH_URL."
    return text


async def _answer(call: Awaitable[Any]) -> Any:
    """The body a backend call answers, as JSON values; its error as a tool error."""
    try:
        body = await call
    except (CoreError, BerthError) as exc:
        raise ToolFailure(failure_text(exc)) from exc
    return msgspec.to_builtins(body)


FINAL_STATES = frozenset({"succeeded", "failed", "timed_out", "canceled"})


def _deployment_next(deployment: dict[str, Any]) -> str:
    state = deployment.get("state")
    ident = deployment.get("id")
    if state in ("queued", "running"):
        return (
            f"The deployment is {state}. Call get_deployment with deployment_id={ident} and "
            f"wait={CALL_WAIT_MAX} to wait for its end (succeeded, failed, timed_out, "
            "canceled), each step reported as progress; cancel stops it."
        )
    if state == "succeeded":
        return (
            "The app runs this revision. Call logs with the installation id to read its "
            "output; rollback goes back to the previous revision."
        )
    return (
        f"The deployment ended {state}: its `error` and `events` say why; the previous "
        "revision (if any) kept running. Fix the cause and deploy again; logs may help."
    )


def _queued(body: dict[str, Any]) -> dict[str, Any]:
    deployment = body.get("deployment", {})
    return {**body, "next": _deployment_next(deployment)}


async def _waited(
    ctx: Context, backend: Backend, deployment: dict[str, Any], wait: int
) -> dict[str, Any] | None:
    """The deployment once it ended, or after ``wait`` seconds (``CALL_WAIT_MAX`` at
    most), each of its events reported as progress meanwhile; ``None`` when it was not
    waited for (no wait, or it had ended already)."""
    if wait <= 0 or deployment.get("state") in FINAL_STATES:
        return None
    ident = str(deployment["id"])
    seen = 0
    with anyio.move_on_after(min(wait, CALL_WAIT_MAX)):
        try:
            async for item in backend.events(ident):
                event = msgspec.to_builtins(item)
                if "step" in event:
                    seen += 1
                    await ctx.report_progress(seen, None, f"{event['step']}: {event['message']}")
        except (CoreError, BerthError) as exc:
            raise ToolFailure(failure_text(exc)) from exc
    return dict(await _answer(backend.deployment(ident)))


async def _deployed(ctx: Context, backend: Backend, queued: Any, wait: int) -> dict[str, Any]:
    """A deploy's or a rollback's answer, waited for as ``_waited`` says: the
    deployment and its installation as they are then, and what to do next."""
    body = await _answer(queued)
    ended = await _waited(ctx, backend, body["deployment"], wait)
    if ended is not None:
        installation = await _answer(backend.installation(body["installation"]["id"]))
        body = {"deployment": ended, "installation": installation}
    return _queued(body)


def _annotations(
    title: str, *, read_only: bool = False, destructive: bool = False, idempotent: bool = False
) -> ToolAnnotations:
    return ToolAnnotations(
        title=title,
        read_only_hint=read_only,
        destructive_hint=destructive,
        idempotent_hint=idempotent,
        open_world_hint=False,
    )


def _tidy(tool: Tool) -> Tool:
    """The tool's input schema as advertised: titled after the tool, no argument but its
    own, no ``default: null`` on an argument that is not nullable (omit it instead)."""
    schema = tool.parameters
    schema["title"] = f"{tool.name}Arguments"
    schema["additionalProperties"] = False
    for prop in schema.get("properties", {}).values():
        if "default" in prop and prop["default"] is None:
            del prop["default"]
    return tool


class BerthTools(MCPServer):
    """An MCP server whose tool calls are ``arguments.checked`` before anything else."""

    def __init__(self, tools: list[Tool], **settings: Any) -> None:
        super().__init__(tools=tools, **settings)
        self._schemas = {tool.name: tool.parameters for tool in tools}

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context | None = None
    ) -> Any:
        schema = self._schemas.get(name)
        if schema is not None:
            try:
                arguments = checked(name, schema, arguments)
            except InvalidInput as exc:
                raise ToolFailure(f"Error executing tool {name}: {failure_text(exc)}") from None
        return await super().call_tool(name, arguments, context)


class Advertised:
    """berth serves tools only: ``initialize`` and ``server/discover`` advertise no prompts
    and no resources, and their methods are unknown."""

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        if ctx.method.startswith(("prompts/", "resources/")):
            raise MCPError(code=METHOD_NOT_FOUND, message=f"Method not found: {ctx.method}")
        result = await call_next(ctx)
        if ctx.method in ("initialize", "server/discover"):
            capabilities = getattr(result, "capabilities", None)
            if capabilities is not None:
                capabilities.prompts = capabilities.resources = None
            elif isinstance(result, dict) and isinstance(result.get("capabilities"), dict):
                kept = {
                    k: v
                    for k, v in result["capabilities"].items()
                    if k not in ("prompts", "resources")
                }
                result = {**result, "capabilities": kept}
        return result


def _version() -> str:
    try:
        return version("berth")
    except PackageNotFoundError:  # run from a source tree that is not installed
        return "0+unknown"


BackendOf = Callable[[Context], Backend]
ToolFunction = TypeVar("ToolFunction", bound=Callable[..., Any])


def build_server(backend_of: BackendOf, *, name: str = "berth") -> MCPServer:
    """An MCP server with every berth tool; each call gets its backend from ``backend_of``."""
    tools: list[Tool] = []

    def add(
        function: Callable[..., Any], name: str, description: str, title: str, **hints: bool
    ) -> None:
        tools.append(
            _tidy(
                Tool.from_function(
                    function,
                    name=name,
                    description=description,
                    annotations=_annotations(title, **hints),
                )
            )
        )

    def tool(title: str, **hints: bool) -> Callable[[ToolFunction], ToolFunction]:
        """A tool whose description is its function's docstring, folded to one line."""

        def register(function: ToolFunction) -> ToolFunction:
            description = " ".join((function.__doc__ or "").split())
            add(function, function.__name__, description, title, **hints)
            return function

        return register

    @tool("Who am I", read_only=True, idempotent=True)
    async def whoami(ctx: Context) -> dict[str, Any]:
        """Who this token is: its user (id, email), team, role there, scopes (read, deploy,
        admin), the only servers it reaches (null: all of the team's) and when it expires.
        The tools listed are the ones these rights allow.
        """
        body = await _answer(backend_of(ctx).whoami())
        return {**body, "next": "list_servers shows the servers this token reaches."}

    @tool("List servers", read_only=True, idempotent=True)
    async def list_servers(
        ctx: Context,
        status: ServerStatusFilter = None,
        name: NameFilter = None,
        limit: PageArg = LIST_PAGE,
        cursor: CursorArg = None,
    ) -> dict[str, Any]:
        """List your servers, oldest first, a page at a time: id, name, status (online,
        offline, pending...), transport, facts. Filter by status or name; pass `nextCursor`
        as cursor for the next page. Use a server's `id` as server_id in the other tools.
        """
        backend = backend_of(ctx)
        body = await _answer(backend.servers(status=status, name=name, limit=limit, cursor=cursor))
        hint = "Deploy to an online server with deploy(server_id=...)."
        if body.get("nextCursor"):
            hint = f"More servers: list_servers(cursor={body['nextCursor']!r}). " + hint
        return {**body, "next": hint}

    @tool("List installations", read_only=True, idempotent=True)
    async def list_installations(
        ctx: Context,
        server_id: ServerId,
        include_removed: Annotated[
            Flag, Field(description="Also list removed installations (their history stays).")
        ] = False,
        status: AppStatusFilter = None,
        name: NameFilter = None,
        limit: PageArg = LIST_PAGE,
        cursor: CursorArg = None,
    ) -> dict[str, Any]:
        """List the apps (installations) on a server, a page at a time: name, image, port,
        domain, url, status, env keys, the last deployment. Removed ones too with
        include_removed; filter by status or name; pass `nextCursor` as cursor for more.
        """
        backend = backend_of(ctx)
        body = await _answer(
            backend.installations(
                server_id,
                include_removed=include_removed,
                status=status,
                name=name,
                limit=limit,
                cursor=cursor,
            )
        )
        hint = "logs, list_revisions, rollback, stop/start/restart take an installation id."
        if body.get("nextCursor"):
            hint = f"More: list_installations(cursor={body['nextCursor']!r}). " + hint
        return {**body, "next": hint}

    @tool("List containers", read_only=True, idempotent=True)
    async def list_containers(ctx: Context, server_id: ServerId) -> dict[str, Any]:
        """List every Docker container on a server (berth's apps and others): name, image
        and the id of the image it runs, state, ports; the last snapshot while the server
        is unreachable.
        """
        return dict(await _answer(backend_of(ctx).containers(server_id)))

    @tool("Deploy an app")
    async def deploy(
        ctx: Context,
        server_id: ServerId,
        name: AppNameArg,
        image: ImageArg = None,
        build: BuildArg = None,
        port: PortArg = None,
        domain: DomainArg = None,
        env: EnvArg = None,
        volumes: VolumesArg = None,
        memory: MemoryArg = None,
        cpus: CpusArg = None,
        restart: RestartArg = None,
        health_path: HealthPathArg = None,
        command: CommandArgs = None,
        host_port: HostPortArg = None,
        stop_grace_seconds: StopGraceArg = None,
        wait: Wait = 0,
        idempotency_key: IdempotencyKeyArg = None,
    ) -> dict[str, Any]:
        """Deploy a Docker image to a server as an app (or a new revision of the app of that
        name), or one the server builds from a Git repository (`build`, instead of `image`).
        Success means healthy: the container runs and its port answers (or health_path
        answers 2xx/3xx); a failed deployment leaves the previous revision running. Rules:
        the image needs a tag; the name is sanitized to a container name and needs 2+ usable
        characters; without a domain `port` is published on `host_port` (default: the same
        port) of the server; relative volume
        host paths live under the app's data directory. Returns the deployment (id, state)
        and the installation; with wait > 0 it reports each step as progress and returns
        once the deployment ends, or after 50 s at most (then get_deployment with wait goes
        on). Every invalid argument is reported at once, by name.
        """
        given = {
            "image": image,
            "build": build,
            "port": port,
            "domain": domain,
            "env": env,
            "volumes": volumes,
            "memory": memory,
            "cpus": cpus,
            "restart": restart,
            "health_path": health_path,
            "command": command,
            "host_port": host_port,
            "stop_grace_seconds": stop_grace_seconds,
            "idempotency_key": idempotency_key,
        }
        backend = backend_of(ctx)
        queued = backend.deploy(
            server_id=server_id,
            name=name,
            **{k: v for k, v in given.items() if v is not None},
        )
        return await _deployed(ctx, backend, queued, wait)

    @tool("Get a deployment", read_only=True, idempotent=True)
    async def get_deployment(
        ctx: Context, deployment_id: DeploymentId, wait: Wait = 0
    ) -> dict[str, Any]:
        """One deployment: state (queued, running, succeeded, failed, timed_out, canceled),
        current step, error, and its step events. With wait > 0 it reports each step as
        progress and returns once the deployment ends, or after 50 s at most.
        """
        backend = backend_of(ctx)
        body = dict(await _answer(backend.deployment(deployment_id)))
        body = await _waited(ctx, backend, body, wait) or body
        return {**body, "next": _deployment_next(body)}

    @tool("List revisions", read_only=True, idempotent=True)
    async def list_revisions(
        ctx: Context, installation_id: InstallationId, limit: Limit = 20, before: BeforeArg = None
    ) -> dict[str, Any]:
        """An installation's deployments (revisions), newest first, kept after removal; pass
        `nextBefore` as before for older ones. A succeeded one's id can be given to rollback.
        """
        backend = backend_of(ctx)
        body = await _answer(backend.revisions(installation_id, limit=limit, before=before))
        return {**body, "next": "rollback(installation_id, deployment_id=<a succeeded id>)."}

    @tool("Read logs", read_only=True, idempotent=True)
    async def logs(
        ctx: Context, installation_id: InstallationId, tail: Lines = 100
    ) -> dict[str, Any]:
        """The last lines of an installation's container output (stdout and stderr), with env
        values redacted.
        """
        return dict(await _answer(backend_of(ctx).logs(installation_id, tail=tail)))

    @tool("Get CPU and memory", read_only=True, idempotent=True)
    async def get_stats(ctx: Context, installation_id: InstallationId) -> dict[str, Any]:
        """CPU (percent of one core) and memory (bytes used, limit) of an installation's
        container, sampled now (about a second); running false when it is stopped.
        """
        return dict(await _answer(backend_of(ctx).stats(installation_id)))

    @tool("Get disk usage", read_only=True, idempotent=True)
    async def get_disk_usage(ctx: Context, server_id: ServerId) -> dict[str, Any]:
        """What Docker keeps on a server's disk, in bytes: images, containers' writable
        layers, volumes, build cache (as docker system df). Can take a few seconds.
        """
        return dict(await _answer(backend_of(ctx).disk_usage(server_id)))

    @tool("Change a server", idempotent=True)
    async def change_server(
        ctx: Context,
        server_id: ServerId,
        name: Annotated[
            str | None,
            _schema("string", t.ServerName, examples=["web-1"]),
            Field(description="A new display name, 1-100 printable characters."),
        ] = None,
        address: Annotated[
            str | None,
            _schema("string", t.Address, examples=["203.0.113.10"]),
            Field(description="A new hostname or IP address (checked at once)."),
        ] = None,
        ssh_port: Annotated[
            int | None,
            _schema("integer", t.Port, examples=[22]),
            Field(description="A new SSH port, 1-65535 (checked at once)."),
        ] = None,
    ) -> dict[str, Any]:
        """Change a server's name, address or SSH port in place: its id, apps and history
        stay. What is left out is kept. A new address or port is checked at once: the server
        goes offline until berth reaches it there.
        """
        backend = backend_of(ctx)
        body = await _answer(
            backend.change_server(server_id, name=name, address=address, ssh_port=ssh_port)
        )
        return {**body, "next": "list_servers shows its status once berth checked it."}

    @tool("Roll back", destructive=True)
    async def rollback(
        ctx: Context,
        installation_id: InstallationId,
        deployment_id: Annotated[
            Any,
            WithJsonSchema(_ID),
            Field(
                description="The succeeded deployment to go back to (list_revisions); "
                "default: the one before the current one."
            ),
        ] = None,
        wait: Wait = 0,
        idempotency_key: IdempotencyKeyArg = None,
    ) -> dict[str, Any]:
        """Deploy an earlier succeeded revision of an installation again (its image, spec and
        env): by default the one before the current one. Replaces the running container once
        the old revision is healthy. A conflict when there is none to go back to or a
        deployment is running. wait works as deploy's.
        """
        backend = backend_of(ctx)
        queued = backend.rollback(
            installation_id, deployment_id=deployment_id, idempotency_key=idempotency_key
        )
        return await _deployed(ctx, backend, queued, wait)

    @tool("Cancel a deployment", destructive=True, idempotent=True)
    async def cancel(ctx: Context, deployment_id: DeploymentId) -> dict[str, Any]:
        """Cancel a queued or running deployment; a running one puts the previous revision back
        (if there is one; an app's first deployment canceled leaves it pending). A conflict
        when it already ended.
        """
        body = dict(await _answer(backend_of(ctx).cancel(deployment_id)))
        return {**body, "next": _deployment_next(body)}

    def change(action: str, description: str, *, destructive: bool, idempotent: bool) -> None:
        async def act(ctx: Context, installation_id: InstallationId) -> dict[str, Any]:
            backend = backend_of(ctx)
            acts = {"stop": backend.stop, "start": backend.start, "restart": backend.restart}
            body = dict(await _answer(acts[action](installation_id)))
            return {**body, "next": "list_installations shows its status; logs its output."}

        title = f"{action.capitalize()} an app"
        add(act, action, description, title, destructive=destructive, idempotent=idempotent)

    change(
        "stop",
        "Stop an installation's container (kept, with its data); its status becomes "
        "`stopped` until start.",
        destructive=True,
        idempotent=True,
    )
    change(
        "start",
        "Start a stopped installation's container again.",
        destructive=False,
        idempotent=True,
    )
    change(
        "restart",
        "Stop and start an installation's container (a short outage each time).",
        destructive=False,
        idempotent=False,
    )

    @tool("Remove an app", destructive=True, idempotent=False)
    async def remove_installation(ctx: Context, installation_id: InstallationId) -> dict[str, Any]:
        """Remove an installation: its containers and route go (volumes on the server stay)
        and it is marked removed; its deployments stay readable. A queued deployment of it
        is canceled; a running one is canceled first (the previous revision put back) and
        waited for, up to a minute: a conflict if it has not ended by then. Nothing is
        removed while the server is unreachable.
        """
        await _answer(backend_of(ctx).remove_installation(installation_id))
        return {
            "removed": installation_id,
            "next": "list_revisions still shows its history; deploying the same name again "
            "starts a new installation.",
        }

    server = BerthTools(
        tools,
        name=name,
        version=_version(),
        instructions=INSTRUCTIONS,
        log_level="WARNING",
    )
    server.middleware.append(Advertised())
    server.middleware.append(OfferedTools(server, backend_of))
    return server


class OfferedTools:
    """``tools/list`` answered with the tools the caller may call: those whose right
    (``TOOL_RIGHTS``) its effective rights hold (the backend's ``whoami``: role ∩ scopes,
    team-wide rights not at all for a server-limited token). When the backend cannot
    say (berth unreachable, a wrong token), every tool is offered: each call then says
    why it fails, and the API refuses whatever the rights do not allow."""

    def __init__(self, server: MCPServer, backend_of: BackendOf) -> None:
        self._server = server
        self._backend_of = backend_of

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        result = await call_next(ctx)
        if ctx.method != "tools/list" or not isinstance(result, dict):
            return result
        backend = self._backend_of(Context(request_context=ctx, mcp_server=self._server))
        rights = await rights_of_caller(backend)
        if rights is None:
            return result
        offered = [x for x in result.get("tools", []) if _right_of(x) in rights]
        return {**result, "tools": offered}


def _right_of(tool: dict[str, Any]) -> Right | None:
    """A listed tool's right; ``None`` (offered to no one) for a tool without one."""
    return TOOL_RIGHTS.get(str(tool.get("name")))


async def rights_of_caller(backend: Backend) -> frozenset[Right] | None:
    """The effective rights of the backend's caller, from its ``whoami``; ``None`` when
    the backend cannot say."""
    try:
        who = msgspec.to_builtins(await backend.whoami())
    except (CoreError, BerthError):
        return None
    scopes = frozenset(TokenScope(s) for s in who["scopes"])
    return rights_of(Role(who["role"]), scopes, limited=who.get("serverIds") is not None)


#: The right each tool needs: its core command's (so the tool list and the API agree),
#: in the order the server lists the tools.
TOOL_RIGHTS: dict[str, Right] = {
    "whoami": c.CurrentToken.right,
    "list_servers": c.ListServers.right,
    "list_installations": c.ListInstallations.right,
    "list_containers": c.ListContainers.right,
    "deploy": c.DeployCommand.right,
    "get_deployment": c.GetDeployment.right,
    "list_revisions": c.ListRevisions.right,
    "logs": c.InstallationLogs.right,
    "get_stats": c.GetInstallationStats.right,
    "get_disk_usage": c.GetServerDiskUsage.right,
    "change_server": c.ChangeServer.right,
    "rollback": c.Rollback.right,
    "cancel": c.CancelDeployment.right,
    "stop": c.ChangeInstallation.right,
    "start": c.ChangeInstallation.right,
    "restart": c.ChangeInstallation.right,
    "remove_installation": c.RemoveInstallation.right,
}

#: The tools, in the order ``tools/list`` gives them: each with its right.
TOOL_NAMES = tuple(TOOL_RIGHTS)
