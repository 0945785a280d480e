"""Pages of a list: ``limit`` entries after a cursor, and the cursor of the next page.

One rule for every list the API pages (servers, installations, webhooks): the cursor is
the id of the last entry of the previous page (``nextCursor``), opaque to clients; a
cursor that names no entry of the list (any more) is an ``InvalidInput`` at ``cursor``,
never an empty page, so a client that kept a stale cursor learns it rather than
believing the list ended.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Generic, TypeVar
from uuid import UUID

import msgspec

from .errors import FieldError, InvalidInput

__all__ = ["Page", "check_cursor", "matches_name", "page"]

T = TypeVar("T")


class Page(msgspec.Struct, Generic[T], frozen=True, kw_only=True):
    """Up to ``limit`` entries; ``next_cursor`` asks for the next page, ``None`` on the last."""

    items: list[T]
    next_cursor: UUID | None


def check_cursor(found: bool, cursor: UUID, *, loc: str = "cursor", what: str = "entry") -> None:
    """``InvalidInput`` at ``loc`` unless the cursor ``found`` its entry."""
    if not found:
        raise InvalidInput(
            [
                FieldError(
                    loc,
                    f"No {what} of this list has this id: give the previous page's "
                    "cursor, or none for the first page.",
                    str(cursor),
                )
            ]
        )


def page(
    items: Sequence[T],
    *,
    limit: int | None,
    cursor: UUID | None,
    key: Callable[[T], UUID],
    what: str = "entry",
) -> Page[T]:
    """The entries of ``items`` (in their order) after the one whose ``key`` is
    ``cursor`` (from the start without one), at most ``limit`` (all without one)."""
    start = 0
    if cursor is not None:
        index = next((i for i, item in enumerate(items) if key(item) == cursor), None)
        check_cursor(index is not None, cursor, what=what)
        assert index is not None
        start = index + 1
    rest = list(items[start:])
    if limit is None or len(rest) <= limit:
        return Page(items=rest, next_cursor=None)
    shown = rest[:limit]
    return Page(items=shown, next_cursor=key(shown[-1]))


def matches_name(name: str, wanted: str | None) -> bool:
    """Whether ``name`` holds ``wanted`` (case-insensitively); every name without one."""
    return wanted is None or wanted.casefold() in name.casefold()
