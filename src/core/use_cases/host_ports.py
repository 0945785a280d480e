"""Diagnostics around a deployment's host port: who holds it before a deploy, and what
port the app itself said it listens on after a failed health check.

Both say in words what a user would otherwise read from Docker's raw error or a
timeout: "port 8091 is held by the app 'shop'", "the app logged 'listening on
3000'; it was deployed with port 8091".
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from uuid import UUID

from ..errors import Conflict
from ..ports import ServerConnection

__all__ = ["logged_port", "logged_port_hint", "port_holder", "refuse_held_port"]

#: "listening on 3000", "Listening on http://0.0.0.0:3000", "running on port 5000",
#: "started server on :8080": a word saying the app serves, then (close after it) a port.
_LISTENING = re.compile(
    r"\b(?:listen(?:ing|s)?|running|serving|started|bound)\b[^\n]{0,60}?"
    r"(?:\bport\s*|:|\bon\s+)(\d{2,5})\b(?!\.\d)",
    re.IGNORECASE,
)


async def port_holder(
    conn: ServerConnection,
    port: int,
    names: Mapping[UUID, str],
    own: UUID | None,
) -> str | None:
    """What holds the server's host ``port`` now, in words, or ``None`` when it is free
    or held by the installation ``own`` itself (a redeploy on its own port).

    A running container that publishes the port is named: by its installation's name
    (``names``) when berth manages it, else by its container name; an app of berth's
    whose port holder publishes it (listed as the app's port) is named even while the
    app is stopped: its holder keeps the port. A port that accepts
    a TCP connection although no container publishes it is held by a process outside
    Docker — unless ``own`` has a container that is not running (restarting, paused):
    the port may be its own then, and is not refused. Raises ``ServerUnreachable`` /
    ``RuntimeFailure`` as the connection does.
    """
    containers = await conn.docker.list_containers()
    for container in containers:
        if not any(p.host_port == port and p.protocol == "tcp" for p in container.ports):
            continue
        if own is not None and container.installation_id == own:
            return None  # its own, in whatever state (paused, restarting)
        app = container.installation_id
        if container.state != "running" and (app is None or app not in names):
            continue  # a stopped app of berth's lists its holder's port: it holds it
        name = names.get(container.installation_id) if container.installation_id else None
        if name is not None:
            return f"the app {name!r}"
        return f"container {container.name!r}"
    if own is not None and any(
        c.installation_id == own and c.state != "running" for c in containers
    ):
        # Its own container is between states (a crash loop being redeployed): the port
        # may be its own; the start reports a real clash in words.
        return None
    if await conn.accepts(port):
        return "a process on the server outside Docker"
    return None


def refuse_held_port(port: int, holder: str | None, field: str = "port") -> None:
    """``Conflict`` (``port-in-use`` at ``field``: ``port``, or ``host_port`` when one was
    given) when ``holder`` holds the host port."""
    if holder is not None:
        raise Conflict(
            f"Host port {port} is already in use on this server by {holder}: choose "
            "another port, stop what holds it, or give a domain.",
            kind="port-in-use",
            field=field,
        )


def logged_port(lines: Iterable[str], port: int) -> tuple[str, int] | None:
    """What the app's output says it listens on, when that is another port than
    ``port`` and no line says it listens on ``port``: the words and the port logged."""
    other: tuple[str, int] | None = None
    for line in lines:
        for found in _LISTENING.finditer(line):
            logged = int(found[1])
            if logged == port:
                return None  # it listens on its port too (and on another one)
            if other is None and 0 < logged < 65536:
                other = (found[0], logged)
    return other


def logged_port_hint(lines: Iterable[str], port: int) -> str | None:
    """When the app's output says it listens on a port other than ``port``, that in
    words (``the app logged 'listening on 3000'; it was deployed with port 8091``)."""
    found = logged_port(lines, port)
    if found is None:
        return None
    return f"the app logged {found[0]!r}; it was deployed with port {port}"
