"""The dashboard's "confirm, then act" handlers, written once: removing a registry, Git
credentials, a notification, a server, an app or its deploy hook, revoking a token,
removing a team member or changing their role.

Each has the same shape (``confirm_then_act``): the thing acted on is one of the
caller's (``one_of``: another team's is as missing as a gone one, a 404); a destructive
action not confirmed yet is answered with the confirmation page, which asks what
berth.js's dialog asks with JavaScript; confirmed, its command goes through the bus,
and the browser is sent on. A refusal the page can show (``Conflict``) is shown there.
A removal of one item of a listing is a whole route (``removal_route``), described by a
``Removal``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar
from uuid import UUID

from berth.core.commands import Command
from berth.core.errors import Conflict, NotFound
from litestar import Controller, Response, post
from litestar.di import NamedDependency
from litestar.handlers import HTTPRouteHandler
from litestar.params import FromPath, URLEncodedBody

from ..controllers.common import Caller
from .forms import ConfirmForm
from .web import Html, SeeOther, uuid_or_404

__all__ = ["Ask", "Removal", "confirm_then_act", "one_of", "removal_route"]

T = TypeVar("T")


@dataclass(frozen=True)
class Ask:
    """What the confirmation page (``confirm.html``) asks before a destructive action:
    asked unless ``form`` (as posted) says ``confirm=yes``."""

    form: ConfirmForm
    title: str
    message: str
    button: str  # the confirming button's words
    back: str  # where its Cancel goes


def _id(item: Any) -> UUID:
    return item.id  # type: ignore[no-any-return]


async def one_of(
    caller: Caller,
    listing: Command[list[T]],
    wanted: str,
    what: str,
    key: Callable[[T], UUID] = _id,
) -> T:
    """The item of the caller's ``listing`` whose ``key`` (its ``id``) is the path's
    ``wanted``; else (``wanted`` no UUID either, before anything is read) a 404 that
    names ``what``."""
    found = uuid_or_404(wanted, what)
    for item in await caller(listing):
        if key(item) == found:
            return item
    raise NotFound(f"{what} not found.")


async def confirm_then_act(
    caller: Caller,
    command: Command[Any],
    done: str | Response[Any],
    *,
    ask: Ask | None = None,
    refused: Callable[[Conflict], Awaitable[Response[Any]]] | None = None,
) -> Response[Any]:
    """The confirmation page while ``ask`` is not confirmed; then ``command`` handled by
    ``caller`` and ``done`` (a path: a 303 to it). A ``Conflict`` is ``refused``'s to
    show; without ``refused``, the error page's."""
    if ask is not None and ask.form.confirm != "yes":
        return Html(
            "confirm.html", title=ask.title, message=ask.message, button=ask.button, back=ask.back
        )
    try:
        await caller(command)
    except Conflict as exc:
        if refused is None:
            raise
        return await refused(exc)
    return SeeOther(done) if isinstance(done, str) else done


@dataclass(frozen=True)
class Removal(Generic[T]):
    """A removal of one of the caller's things from a dashboard page: which listing holds
    it (``what``: the 404's words; ``key``: its id), what the confirmation page asks of
    it, the command that removes it and where the browser goes then."""

    listing: Command[list[T]]
    what: str
    title: Callable[[T], str]
    message: str
    button: str
    back: str
    command: Callable[[T], Command[Any]]
    done: str
    key: Callable[[T], UUID] = _id


def removal_route(path: str, removing: Removal[Any]) -> HTTPRouteHandler:
    """A controller's POST ``path`` (its ``{item_id:str}`` the thing's id) that removes
    one of the caller's things as ``removing`` says, confirmed first."""

    @post(path)
    async def remove(
        self: Controller,
        caller: NamedDependency[Caller],
        item_id: FromPath[str],
        data: URLEncodedBody[ConfirmForm],
    ) -> Response[Any]:
        item = await one_of(caller, removing.listing, item_id, removing.what, removing.key)
        ask = Ask(
            data,
            title=removing.title(item),
            message=removing.message,
            button=removing.button,
            back=removing.back,
        )
        return await confirm_then_act(caller, removing.command(item), removing.done, ask=ask)

    return remove
