"""Reading berth's two streams as they come: a deployment's events (Server-Sent Events)
and an installation's followed log (``text/plain``, a line each).

Lines are split as each format says, not as ``str.splitlines`` would: an event stream's
lines end at CR, LF or CRLF; a log's at LF only, so a ``\\r`` (a progress bar), a form
feed or a U+2028 an app writes stays inside its line.
"""

from __future__ import annotations

import re

import msgspec

from .errors import UnexpectedAnswer
from .models import DeploymentEnd, DeploymentStep, Event

__all__ = ["DeploymentEvents", "LogLines", "SseMessages"]

_SSE_LINE = re.compile(r"\r\n|\r|\n")


class _Lines:
    """Complete lines out of text fed in pieces."""

    def __init__(self, pattern: re.Pattern[str]) -> None:
        self._pattern = pattern
        self._rest = ""

    def feed(self, text: str) -> list[str]:
        buffer = self._rest + text
        lines, start = [], 0
        for match in self._pattern.finditer(buffer):
            if match.group() == "\r" and match.end() == len(buffer):
                break  # a CR at the end may be half of a CRLF still to come
            lines.append(buffer[start : match.start()])
            start = match.end()
        self._rest = buffer[start:]
        return lines

    def close(self) -> list[str]:
        rest, self._rest = self._rest.removesuffix("\r"), ""
        return [rest] if rest else []


class SseMessages:
    """``(id, event, data)`` of each Server-Sent Events message, from its lines fed in
    pieces. Comments and ``retry`` are skipped, as are messages without data (the
    spec's rule)."""

    def __init__(self) -> None:
        self._id: str | None = None
        self._event = "message"
        self._data: list[str] = []

    def feed(self, lines: list[str]) -> list[tuple[str | None, str, str]]:
        messages = []
        for line in lines:
            if not line:
                if self._data:
                    messages.append((self._id, self._event, "\n".join(self._data)))
                self._id, self._event, self._data = None, "message", []
            elif not line.startswith(":"):
                name, _, value = line.partition(":")
                value = value.removeprefix(" ")
                if name == "id":
                    self._id = value
                elif name == "event":
                    self._event = value
                elif name == "data":
                    self._data.append(value)
        return messages


class DeploymentEvents:
    """A deployment's event stream: its steps (``DeploymentStep``), then its end
    (``DeploymentEnd``), after which it is ``done``; a cut stream resumes after the
    last step seen (``Last-Event-ID``)."""

    resumable = True
    read_timeout: float | None = 60.0  # berth sends a comment every 15 s while nothing happens

    def __init__(self) -> None:
        self._lines = _Lines(_SSE_LINE)
        self._messages = SseMessages()
        self._last: int | None = None
        self.done = False

    def feed(self, text: str) -> list[DeploymentStep | DeploymentEnd]:
        return self._items(self._lines.feed(text))

    def close(self) -> list[DeploymentStep | DeploymentEnd]:
        return self._items([*self._lines.close(), ""])

    def resume(self) -> dict[str, str]:
        self._lines, self._messages = _Lines(_SSE_LINE), SseMessages()
        return {} if self._last is None else {"Last-Event-ID": str(self._last)}

    def _items(self, lines: list[str]) -> list[DeploymentStep | DeploymentEnd]:
        try:
            return self._decoded(lines)
        except msgspec.DecodeError as exc:
            raise UnexpectedAnswer(f"an event that is not the API's: {exc}") from exc

    def _decoded(self, lines: list[str]) -> list[DeploymentStep | DeploymentEnd]:
        items: list[DeploymentStep | DeploymentEnd] = []
        for event_id, kind, data in self._messages.feed(lines):
            if self.done:
                break
            if kind == "step":
                step = msgspec.json.decode(data, type=Event)
                number = int(event_id) if event_id and event_id.isdigit() else None
                if number is not None:
                    self._last = number
                items.append(
                    DeploymentStep(id=number, at=step.at, step=step.step, message=step.message)
                )
            elif kind == "end":
                items.append(msgspec.json.decode(data, type=DeploymentEnd))
                self.done = True
        return items


class LogLines:
    """A followed log: its lines (without their ``\\n``), until the container stops.
    Not resumable: a second request would repeat its last lines."""

    resumable = False
    done = False
    read_timeout: float | None = None  # a quiet app writes nothing for as long as it likes

    def __init__(self) -> None:
        self._lines = _Lines(re.compile("\n"))

    def feed(self, text: str) -> list[str]:
        return self._lines.feed(text)

    def close(self) -> list[str]:
        return self._lines.close()

    def resume(self) -> dict[str, str]:
        return {}
