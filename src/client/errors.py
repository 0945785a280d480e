"""What a call can raise, and the one way a problem is shown to a person.

``ApiError``: berth answered with an error (RFC 9457 ``application/problem+json``, or
a proxy's page in front of it). ``Unreachable``: no answer at all (connection refused,
timed out, a stream cut and not resumed). ``UnexpectedAnswer``: a success whose body is
not what the API documents. All three are ``BerthError``s.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import msgspec

from .models import Problem, ProblemField

__all__ = [
    "ApiError",
    "BerthError",
    "FieldProblem",
    "UnexpectedAnswer",
    "Unreachable",
    "printable",
    "render_problem",
]

# C0 controls but tab and newline, DEL, C1 controls: what a terminal acts on.
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """``text`` safe to print on a terminal: every control character but tab and
    newline shown as Python writes it in a string (``\\x1b``, ``\\r``, ``\\x9b``), so
    a server's or a container's text cannot move the cursor, recolour or retitle it."""
    return _CONTROLS.sub(lambda m: repr(m.group())[1:-1], text)


class BerthError(Exception):
    """A call to berth failed; ``str()`` says why, for a person."""


class Unreachable(BerthError):
    """berth did not answer (nothing listens, a timeout, a stream cut for good)."""


class UnexpectedAnswer(BerthError):
    """A success whose body is not what the API documents (not berth, or a bug)."""


@dataclass(frozen=True, slots=True)
class FieldProblem:
    """One invalid input: where the API says (``body.healthPath``), the argument of the
    client's method it came from (``health_path``), and the message."""

    location: str
    argument: str
    message: str


@dataclass(eq=False)  # not frozen: an exception's traceback is assigned as it travels
class ApiError(BerthError):
    """berth answered an error: the problem's fields, and ``retry_after`` (seconds) of a
    429 or 503."""

    status: int
    type: str
    title: str
    detail: str
    errors: Sequence[FieldProblem] = ()
    retry_after: int | None = None
    request_id: str | None = None

    @property
    def kind(self) -> str:
        """The problem's kind: ``not-found`` of ``urn:berth:problem:not-found``."""
        return self.type.rsplit(":", 1)[-1]

    def __str__(self) -> str:
        return render_problem(self)

    @classmethod
    def of(
        cls,
        status: int,
        body: bytes,
        headers: Mapping[str, str],
        arguments: Mapping[str, str] | None = None,
    ) -> ApiError:
        """The error of an answer: its problem body (or, for a page that is not one, its
        first 200 characters as ``detail``); ``arguments`` names each location's argument
        (``{"body.healthPath": "health_path"}``; the location itself otherwise)."""
        retry_after = headers.get("Retry-After", "")
        after = int(retry_after) if retry_after.isdigit() else None
        try:
            problem = msgspec.json.decode(body, type=Problem)
        except msgspec.DecodeError:
            text = body.decode("utf-8", "replace").strip()[:200]
            return cls(status, "about:blank", f"HTTP {status}", text, retry_after=after)
        return cls(
            status,
            problem.type,
            problem.title,
            problem.detail,
            [_field(e, arguments or {}) for e in problem.errors],
            after,
            problem.request_id,
        )


def _field(error: ProblemField, arguments: Mapping[str, str]) -> FieldProblem:
    """``body.env.My-Key`` → ``env.My-Key``: the longest named prefix, then the rest."""
    location = error.location
    cuts = [m.start() for m in re.finditer(r"[.\[]", location)] + [len(location)]
    for cut in reversed(cuts):
        if location[:cut] in arguments:
            argument = arguments[location[:cut]] + location[cut:]
            return FieldProblem(location, argument, error.message)
    return FieldProblem(location, location, error.message)


def render_problem(error: ApiError) -> str:
    """An error as a person reads it: ``<status> <title>``, the detail, then each invalid
    field as ``location: message``, one a line; a 5xx's request id last. Control
    characters are shown, not sent (``printable``)."""
    if error.type == "about:blank" and error.title == f"HTTP {error.status}":
        return printable(f"HTTP {error.status}" + (f": {error.detail}" if error.detail else ""))
    lines = [f"{error.status} {error.title}"]
    if error.detail and error.detail != error.title:
        lines.append(f"  {error.detail}")
    lines += [f"  {e.location}: {e.message}" for e in error.errors]
    if error.status >= 500 and error.request_id:
        lines.append(f"  request id: {error.request_id}")
    return printable("\n".join(lines))
