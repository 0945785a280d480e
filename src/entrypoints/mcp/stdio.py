"""``berth mcp``: berth's MCP tools over stdio, for a desktop agent, backed by a berth's
HTTP API (``BERTH_URL``, ``BERTH_TOKEN``) as the CLI's client commands are.

The tools are ``tools.py``'s, the same as the ones mounted at ``/mcp``; only their
backend differs: each call is one API request, whose problem+json errors become tool
errors naming each field as the tools call it (``body.healthPath`` → ``health_path``).
"""

from __future__ import annotations

import json
import re
import urllib.parse
from collections.abc import Mapping
from typing import Any

import httpx
from mcp.server import MCPServer

from .tools import ToolFailure, build_server

__all__ = ["HttpBackend", "problem_text", "run_stdio", "stdio_server"]

_TIMEOUT = 30.0
_PREFIX = re.compile(r"^(?:body|query|path|header)\.")
_CAMEL = re.compile(r"(?<=[a-z0-9])([A-Z])")
_HEAD = re.compile(r"([^.\[]*)(.*)", re.DOTALL)
# The API's query parameters, as the tools name them.
_QUERY_NAMES = {"include": "include_removed"}


def _tool_location(location: str) -> str:
    """An API error location as the tools name the argument: ``body.healthPath`` →
    ``health_path``, ``body.env.My-Key`` → ``env.My-Key`` (env keys as given)."""
    rest = _PREFIX.sub("", location)
    head, tail = _HEAD.match(rest).groups()  # type: ignore[union-attr]  # always matches
    return _QUERY_NAMES.get(head, _CAMEL.sub(r"_\1", head).lower()) + tail


def problem_text(status: int, body: bytes) -> str:
    """A problem+json answer as a tool error: its kind, detail and every field's message."""
    try:
        problem = json.loads(body)
    except ValueError:
        problem = None
    if not isinstance(problem, dict):
        return f"HTTP {status}: {body.decode('utf-8', 'replace')[:200]}"
    kind = str(problem.get("type") or "error").rsplit(":", 1)[-1]
    detail = str(problem.get("detail") or problem.get("title") or f"HTTP {status}")
    errors = [e for e in problem.get("errors") or [] if isinstance(e, dict)]
    if errors:
        lines = [f"{kind}: {len(errors)} invalid argument(s); fix each and call again:"]
        lines += [
            f"- {_tool_location(str(e.get('location', '')))}: {e.get('message', '')}"
            for e in errors
        ]
        return "\n".join(lines)
    text = f"{kind}: {detail}"
    if status == 401:
        text += " Check BERTH_TOKEN (Settings → API Token) and BERTH_URL."
    return text


def _q(value: str) -> str:
    return urllib.parse.quote(value, safe="")


class HttpBackend:
    """The tools' backend in ``berth mcp``: one request to the API per call."""

    def __init__(
        self, url: str, token: str, *, transport: httpx.AsyncBaseTransport | None = None
    ) -> None:
        self._client = httpx.AsyncClient(
            base_url=url.rstrip("/"),
            headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
            timeout=_TIMEOUT,
            trust_env=False,  # talk to the URL given, never through a proxy of the env
            transport=transport,
        )
        self._url = url

    async def aclose(self) -> None:
        await self._client.aclose()

    async def _call(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, object] | None = None,
        body: object = None,
        wait: int = 0,
        key: str | None = None,
    ) -> Any:
        params = {k: str(v) for k, v in (query or {}).items()}
        headers = {"Idempotency-Key": key} if key is not None else None
        try:
            response = await self._client.request(
                method,
                "/api/agent" + path,
                params=params,
                json=body,
                headers=headers,
                timeout=_TIMEOUT + wait,
            )
        except httpx.HTTPError as exc:
            reason = str(exc) or type(exc).__name__
            raise ToolFailure(
                f"unreachable: berth is not reachable at {self._url} ({reason}); "
                "check BERTH_URL and try again."
            ) from exc
        if response.status_code >= 400:
            raise ToolFailure(problem_text(response.status_code, response.content))
        return response.json() if response.content else None

    async def list_servers(self) -> Any:
        return await self._call("GET", "/servers")

    async def list_installations(self, server_id: str, include_removed: bool) -> Any:
        query = {"serverId": server_id} | ({"include": "removed"} if include_removed else {})
        return await self._call("GET", "/install", query=query)

    async def list_containers(self, server_id: str) -> Any:
        return await self._call("GET", f"/servers/{_q(server_id)}/containers")

    async def deploy(self, fields: dict[str, Any], wait: int, idempotency_key: str | None) -> Any:
        body = {_CAMEL_OF.get(k, k): v for k, v in fields.items()}
        query = {"wait": wait} if wait else None
        return await self._call(
            "POST",
            "/docker/deploy",
            query=query,
            body=body,
            wait=wait,
            key=idempotency_key,
        )

    async def get_deployment(self, deployment_id: str) -> Any:
        return await self._call("GET", f"/deployments/{_q(deployment_id)}")

    async def list_revisions(self, installation_id: str, limit: int) -> Any:
        path = f"/installations/{_q(installation_id)}/deployments"
        return await self._call("GET", path, query={"limit": limit})

    async def logs(self, installation_id: str, tail: int) -> Any:
        path = f"/installations/{_q(installation_id)}/logs"
        return await self._call("GET", path, query={"tail": tail})

    async def get_stats(self, installation_id: str) -> Any:
        return await self._call("GET", f"/installations/{_q(installation_id)}/stats")

    async def get_disk_usage(self, server_id: str) -> Any:
        return await self._call("GET", f"/servers/{_q(server_id)}/disk")

    async def rollback(
        self, installation_id: str, to: str | None, wait: int, key: str | None
    ) -> Any:
        body = {"deploymentId": to} if to is not None else None
        query = {"wait": wait} if wait else None
        path = f"/installations/{_q(installation_id)}/rollback"
        return await self._call("POST", path, query=query, body=body, wait=wait, key=key)

    async def cancel(self, deployment_id: str) -> Any:
        return await self._call("POST", f"/deployments/{_q(deployment_id)}/cancel")

    async def change(self, installation_id: str, action: str) -> Any:
        return await self._call("POST", f"/installations/{_q(installation_id)}/{action}")

    async def remove_installation(self, installation_id: str) -> None:
        await self._call("DELETE", f"/installations/{_q(installation_id)}")


# The deploy body's camelCase names (the API's wire format).
_CAMEL_OF = {"server_id": "serverId", "health_path": "healthPath"}


def stdio_server(backend: HttpBackend) -> MCPServer:
    """The tools, every call made with ``backend``."""
    return build_server(lambda ctx: backend)


async def run_stdio(url: str, token: str) -> None:
    """Serve the tools on stdin/stdout until the client closes them."""
    backend = HttpBackend(url, token)
    try:
        await stdio_server(backend).run_stdio_async()
    finally:
        await backend.aclose()
