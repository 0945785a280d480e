"""The account's pages: sign up, sign in, sign out, and the settings (the API token and
private registries' credentials)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from berth.core import commands as c
from berth.core.bus import MessageBus
from berth.core.errors import (
    Conflict,
    Forbidden,
    InvalidInput,
    NotFound,
    TooManyAttempts,
    Unauthorized,
)
from berth.core.models import User
from berth.core.types import RuleError, check_email, check_password
from berth.core.use_cases import SignUpMode
from litestar import Controller, Request, Response, get, post
from litestar.params import QueryParameter, URLEncodedBody

from .forms import ConfirmForm, LoginForm, RegistryForm, SignUpForm, parse_registry_form
from .web import PUBLIC, SESSION_COOKIE, Html, SeeOther, safe_next, session_cookies, uuid_or_404

__all__ = ["AccountPages", "SettingsPage"]

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
    status: int,
    mode: SignUpMode,
    invite: str,
    email: str = "",
    errors: dict[str, str] | None = None,
) -> Html:
    """The sign-up form (``status``: 200, 403 closed, 409/422 with ``errors`` by field)."""
    return Html(
        "signup.html",
        status_code=status,
        errors=errors or {},
        mode=mode.value,
        invite=invite,
        email=email,
    )


class AccountPages(Controller):
    """Sign up, sign in, sign out; ``/`` sends each visitor where they belong."""

    @get("/", opt=PUBLIC)
    async def home(self, request: Req) -> SeeOther:
        return SeeOther("/servers" if request.user is not None else "/login")

    @get("/login", opt=PUBLIC)
    async def login_form(self, request: Req, bus: MessageBus, target: Next = "") -> Response[Any]:
        if request.user is not None:
            return SeeOther(safe_next(target))
        mode = await bus.handle(c.SignUpPolicy())
        if mode is SignUpMode.FIRST:
            return SeeOther("/signup")
        return Html("login.html", email="", next=safe_next(target), mode=mode.value, error=None)

    @post("/login", opt=PUBLIC)
    async def login(
        self, request: Req, bus: MessageBus, data: URLEncodedBody[LoginForm]
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
    async def signup_form(self, request: Req, bus: MessageBus, invite: str = "") -> Response[Any]:
        if request.user is not None:
            return SeeOther("/servers")
        mode = await bus.handle(c.SignUpPolicy())
        return _signup_page(403 if mode is SignUpMode.INVITE and not invite else 200, mode, invite)

    @post("/signup", opt=PUBLIC)
    async def signup(
        self, request: Req, bus: MessageBus, data: URLEncodedBody[SignUpForm]
    ) -> Response[Any]:
        email, password, invite = data.email.strip(), data.password, data.invite
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
            except Forbidden as exc:
                errors["form"], status = exc.detail, 403
            else:
                return await _start_session(request, bus, started.session_id, "/servers")
        return _signup_page(status, mode, invite, email, errors)

    @post("/logout")
    async def logout(self, request: Req, bus: MessageBus) -> SeeOther:
        await _end_current_session(request, bus)
        return SeeOther("/login?done=signed-out", cookies=session_cookies(request, None))


async def _settings_page(
    bus: MessageBus,
    user: User,
    *,
    status: int = 200,
    new_token: str | None = None,
    registry_form: RegistryForm | None = None,
    replace_url: str | None = None,
) -> Html:
    return Html(
        "settings.html",
        status_code=status,
        token=await bus.handle(c.TokenInfo(), user),
        new_token=new_token,
        registries=await bus.handle(c.ListRegistries(), user),
        registry_form=registry_form or RegistryForm(),
        replace_url=replace_url,
    )


class SettingsPage(Controller):
    """Settings → API Token: its first characters and last use; generate or regenerate.
    Settings → Registries: private registries' credentials: list, add, remove."""

    path = "/settings"

    @get("/")
    async def settings(self, bus: MessageBus, user: User) -> Html:
        return await _settings_page(bus, user)

    @post("/registries")
    async def add_registry(
        self, bus: MessageBus, user: User, data: URLEncodedBody[RegistryForm]
    ) -> Response[Any]:
        shown, command = parse_registry_form(data)
        if command is None:
            return await _settings_page(bus, user, status=422, registry_form=shown)
        try:
            await bus.handle(command, user)
        except Conflict as exc:
            shown.errors["host"] = exc.detail
            return await _settings_page(bus, user, status=409, registry_form=shown)
        return SeeOther("/settings?done=registry-added#registries")

    @post("/registries/{registry_id:str}/delete")
    async def remove_registry(
        self, bus: MessageBus, user: User, registry_id: str, data: URLEncodedBody[ConfirmForm]
    ) -> Response[Any]:
        rid = uuid_or_404(registry_id, "Registry")
        found = [r for r in await bus.handle(c.ListRegistries(), user) if r.id == rid]
        if not found:
            raise NotFound("Registry not found.")
        if data.confirm != "yes":
            return Html(
                "confirm.html",
                title=f"Remove the credentials for {found[0].host}?",
                message="Deploys of images from this registry pull without credentials "
                "from now on.",
                button="Remove registry",
                back="/settings#registries",
            )
        await bus.handle(c.RemoveRegistry(registry_id=rid), user)
        return SeeOther("/settings?done=registry-removed#registries")

    @post("/token")
    async def token(self, bus: MessageBus, user: User, data: URLEncodedBody[ConfirmForm]) -> Html:
        current = await bus.handle(c.TokenInfo(), user)
        if current is not None and data.confirm != "yes":
            return Html(
                "confirm.html",
                title="Regenerate the API token?",
                message=(
                    f"The current token ({current.prefix}…) stops working at once: "
                    "scripts and agents that use it get 401 until they have the new one."
                ),
                button="Regenerate token",
                back="/settings",
            )
        new_token = await bus.handle(c.RegenerateToken(), user)
        return await _settings_page(
            bus, user, status=201, new_token=new_token, replace_url="/settings"
        )

    @get("/token")
    async def token_address(self) -> SeeOther:
        """The address a new token's page stood at: reached again (reload, back, a link),
        it is the settings page, never a form sent twice nor a bare 405."""
        return SeeOther("/settings")
