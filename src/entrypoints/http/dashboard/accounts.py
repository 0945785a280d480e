"""The account's pages: sign up, sign in, sign out."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from berth.core import commands as c
from berth.core.bus import MessageBus
from berth.core.errors import (
    NO_SETUP_CODE,
    Conflict,
    Forbidden,
    InvalidInput,
    TooManyAttempts,
    Unauthorized,
)
from berth.core.models import User
from berth.core.results import SignUpMode
from berth.core.types import RuleError, check_email, check_password
from litestar import Controller, Request, Response, get, post
from litestar.di import NamedDependency
from litestar.params import FromQuery, QueryParameter, URLEncodedBody

from ...settings import Settings
from .forms import LoginForm, SignUpForm
from .web import PUBLIC, SESSION_COOKIE, Html, SeeOther, safe_next, session_cookies

__all__ = ["AccountPages"]

Req = Request[User | None, Any, Any]
Next = Annotated[str, QueryParameter(name="next")]


def rule_errors(*fields: tuple[str, Callable[[object], object], object]) -> dict[str, str]:
    """``{location: message}`` for each ``(location, check, value)`` whose core rule
    ``check`` refuses ``value``."""
    errors: dict[str, str] = {}
    for location, check, value in fields:
        try:
            check(value)
        except RuleError as exc:
            errors[location] = str(exc)
    return errors


async def _start_session(request: Req, bus: MessageBus, session_id: str, target: str) -> SeeOther:
    """To ``target`` with the new session's cookie, the visitor's earlier session ended."""
    await _end_current_session(request, bus)
    return SeeOther(target, cookies=session_cookies(request, session_id))


async def _end_current_session(request: Req, bus: MessageBus) -> None:
    session_id = request.cookies.get(SESSION_COOKIE)
    if session_id:
        await bus.handle(c.SignOut(session_id=session_id))


def _signup_page(
    settings: Settings,
    status: int,
    mode: SignUpMode,
    invite: str,
    email: str = "",
    errors: dict[str, str] | None = None,
    target: str = "",
) -> Html:
    """The sign-up form (``status``: 200, 403 closed, 409/422 with ``errors`` by field)."""
    return Html(
        "signup.html",
        status_code=status,
        errors=errors or {},
        local_managed=settings.local,
        mode=mode.value,
        invite=invite,
        email=email,
        next=target,
    )


class AccountPages(Controller):
    """Sign up, sign in, sign out; ``/`` sends each visitor where they belong."""

    @get("/", opt=PUBLIC)
    async def home(self, request: Req) -> SeeOther:
        return SeeOther("/servers" if request.user is not None else "/login")

    @get("/login", opt=PUBLIC)
    async def login_form(
        self, request: Req, bus: NamedDependency[MessageBus], target: Next = ""
    ) -> Response[Any]:
        if request.user is not None:
            return SeeOther(safe_next(target))
        mode = await bus.handle(c.SignUpPolicy())
        if mode is SignUpMode.FIRST:
            return SeeOther("/signup")
        return Html("login.html", email="", next=safe_next(target), mode=mode.value, error=None)

    @post("/login", opt=PUBLIC)
    async def login(
        self, request: Req, bus: NamedDependency[MessageBus], data: URLEncodedBody[LoginForm]
    ) -> Response[Any]:
        email, target = data.email.strip(), safe_next(data.next)
        address = request.client.host if request.client else "unknown"
        mode = (await bus.handle(c.SignUpPolicy())).value

        def again(status: int, error: str, headers: dict[str, str] | None = None) -> Html:
            return Html(
                "login.html",
                status_code=status,
                headers=headers,
                email=email,
                next=target,
                mode=mode,
                error=error,
            )

        try:
            started = await bus.handle(
                c.SignIn(email=email, password=data.password, address=address)
            )
        except TooManyAttempts as exc:
            return again(429, exc.detail, {"Retry-After": str(exc.retry_after)})
        except Unauthorized:
            return again(400, "Wrong email or password.")
        return await _start_session(request, bus, started.session_id, target)

    @get("/signup", opt=PUBLIC)
    async def signup_form(
        self,
        request: Req,
        bus: NamedDependency[MessageBus],
        settings: NamedDependency[Settings],
        invite: FromQuery[str] = "",
        target: Next = "",
    ) -> Response[Any]:
        if request.user is not None:
            return SeeOther(safe_next(target))
        mode = await bus.handle(c.SignUpPolicy())
        status = 403 if mode is SignUpMode.INVITE and not invite else 200
        return _signup_page(settings, status, mode, invite, target=safe_next(target))

    @post("/signup", opt=PUBLIC)
    async def signup(
        self,
        request: Req,
        bus: NamedDependency[MessageBus],
        settings: NamedDependency[Settings],
        data: URLEncodedBody[SignUpForm],
    ) -> Response[Any]:
        email, password, invite = data.email.strip(), data.password, data.invite.strip()
        mode = await bus.handle(c.SignUpPolicy())
        errors: dict[str, str] = {}
        status = 422
        if mode is SignUpMode.INVITE and not invite:
            status = 403  # closed: whatever was typed, nobody signs up without an invitation
        else:
            # Every broken field at once: the core's rules for email and password, and the
            # second password, before anything is asked of the store.
            errors = rule_errors(
                ("email", check_email, email), ("password", check_password, password)
            )
            if password != data.password_again:
                errors["password_again"] = "The two passwords differ."  # noqa: S105
            if mode is SignUpMode.FIRST and not invite:
                errors["invite"] = NO_SETUP_CODE
                status = 403
        if not errors and status != 403:
            try:
                started = await bus.handle(
                    c.SignUp(email=email, password=password, invite=invite or None)
                )
            except InvalidInput as exc:
                for error in exc.errors:
                    errors.setdefault(error.location, error.message)
            except Conflict as exc:
                errors["email"], status = exc.detail, 409
            except Forbidden as exc:  # closed; or the first account's code, beside its field
                errors[exc.field or "form"], status = exc.detail, 403
            else:
                target = safe_next(data.next)  # e.g. back to a team invitation's page
                return await _start_session(request, bus, started.session_id, target)
        return _signup_page(settings, status, mode, invite, email, errors, safe_next(data.next))

    @post("/logout")
    async def logout(self, request: Req, bus: NamedDependency[MessageBus]) -> SeeOther:
        await _end_current_session(request, bus)
        return SeeOther("/login?done=signed-out", cookies=session_cookies(request, None))
