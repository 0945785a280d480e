"""Settings: the API token (its first characters and last use; generate or regenerate),
private registries' and private Git repositories' credentials (list, add, remove) and
notifications: webhooks, in Slack's, Discord's or the standard format (list, add, remove,
send a test)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from berth.core import commands as c
from berth.core.errors import Conflict, InvalidInput
from berth.core.models import WebhookEvent, WebhookFormat
from berth.core.results import WebhookTestResult
from litestar import Controller, Response, get, post
from litestar.di import NamedDependency
from litestar.params import FromPath, URLEncodedBody

from ..controllers.common import Caller
from .confirming import Removal, removal_route
from .forms import (
    ConfirmForm,
    GitCredentialForm,
    RegistryForm,
    WebhookForm,
    parse_git_credential_form,
    parse_registry_form,
    parse_webhook_form,
)
from .web import Html, SeeOther, uuid_or_404

__all__ = ["SettingsPage"]

#: Each webhook event in words, as the notification settings offer it.
EVENT_WORDS = {
    WebhookEvent.DEPLOYMENT_SUCCEEDED: "A deployment succeeded",
    WebhookEvent.DEPLOYMENT_FAILED: "A deployment failed or timed out",
    WebhookEvent.DEPLOYMENT_CANCELED: "A deployment was canceled",
    WebhookEvent.SERVER_OFFLINE: "A server went offline",
    WebhookEvent.SERVER_ONLINE: "A server is back online",
    WebhookEvent.INSTALLATION_DOWN: "An app went down (its container exited or is gone)",
    WebhookEvent.INSTALLATION_UP: "An app is up again",
}


@dataclass(frozen=True)
class _SavedPerHost:
    """A kind of credentials saved per host as the settings page has it: its section
    (``id``, also its forms' path), the thing's name in element ids and ``done`` words
    (``noun``), its form's field names' ``prefix`` (the page holds both forms), and what
    the page and its confirmation say of it."""

    id: str
    noun: str
    prefix: str
    heading: str
    intro: tuple[str, str, str]  # the words before an example host, it, the words after
    empty: str
    add_heading: str
    add_button: str
    placeholder: str
    named_in: str  # the host "as in ..."
    row_key: str  # the table rows' data attribute: the host
    remove_button: str
    removed: str  # what the confirmation says happens then
    removed_inline: str  # the same, in the table's own confirmation (JavaScript's)

    def removal(self, listing: c.Command[list[Any]], what: str, command: Any) -> Removal[Any]:
        return Removal(
            listing=listing,
            what=what,
            title=lambda saved: f"Remove the credentials for {saved.host}?",
            message=self.removed,
            button=self.remove_button,
            back=f"/settings#{self.id}",
            command=command,
            done=f"/settings?done={self.noun}-removed#{self.id}",
        )


REGISTRIES = _SavedPerHost(
    id="registries",
    noun="registry",
    prefix="",
    heading="Registries",
    intro=(
        "Credentials for private registries. A deploy of an image whose registry is one of "
        "these hosts (",
        "registry.example.com:5000/team/app:1.4",
        ") pulls with them, over SSH and locally. Passwords and tokens are stored encrypted "
        "and never shown again.",
    ),
    empty="No registries yet: images are pulled without credentials.",
    add_heading="Add a registry",
    add_button="Add registry",
    placeholder="registry.example.com:5000",
    named_in="the image name",
    row_key="data-registry",
    remove_button="Remove registry",
    removed="Deploys of images from this registry pull without credentials from now on.",
    removed_inline="Deploys of its images pull without credentials from now on.",
)
GIT_HOSTS = _SavedPerHost(
    id="git-credentials",
    noun="git-credential",
    prefix="git_",
    heading="Git repositories",
    intro=(
        "Credentials for private Git repositories. A build from a repository on one of these "
        "hosts (",
        "https://git.example.com/acme/shop.git",
        ") fetches with them. Use an access token that can read the repository; it is stored "
        "encrypted and never shown again.",
    ),
    empty="No Git credentials yet: repositories are fetched without credentials.",
    add_heading="Add Git credentials",
    add_button="Add Git credentials",
    placeholder="git.example.com",
    named_in="the repository URL",
    row_key="data-git-host",
    remove_button="Remove credentials",
    removed="Builds from its repositories fetch without credentials from now on.",
    removed_inline="Builds from its repositories fetch without credentials from now on.",
)


async def _settings_page(
    caller: Caller,
    *,
    status: int = 200,
    new_token: str | None = None,
    host_form: RegistryForm | GitCredentialForm | None = None,
    webhook_form: WebhookForm | None = None,
    new_webhook: Any = None,
    tested: WebhookTestResult | None = None,
    replace_url: str | None = None,
) -> Html:
    return Html(
        "settings.html",
        status_code=status,
        token=await caller(c.TokenInfo()),
        new_token=new_token,
        # Each kind of credentials saved per host: its words, its saved ones, its form.
        saved_per_host=[
            (
                REGISTRIES,
                await caller(c.ListRegistries()),
                host_form if isinstance(host_form, RegistryForm) else RegistryForm(),
            ),
            (
                GIT_HOSTS,
                await caller(c.ListGitCredentials()),
                host_form if isinstance(host_form, GitCredentialForm) else GitCredentialForm(),
            ),
        ],
        webhooks=await caller(c.ListWebhooks()),
        webhook_form=webhook_form or WebhookForm(event=["deployment.failed", "server.offline"]),
        new_webhook=new_webhook,
        tested=tested,
        event_words=EVENT_WORDS,
        formats=[f.value for f in WebhookFormat],
        replace_url=replace_url,
    )


async def _add_saved_per_host(
    caller: Caller,
    kind: _SavedPerHost,
    shown: RegistryForm | GitCredentialForm,
    command: c.AddHostCredentials[Any] | None,
) -> Response[Any]:
    """Save the credentials ``shown`` (parsed as ``command``: ``None`` on errors); the page
    again with the form's errors (the host's, for one saved already), or on to the
    section."""
    if command is None:
        return await _settings_page(caller, status=422, host_form=shown)
    try:
        await caller(command)
    except Conflict as exc:
        shown.errors[f"{kind.prefix}host"] = exc.detail
        return await _settings_page(caller, status=409, host_form=shown)
    return SeeOther(f"/settings?done={kind.noun}-added#{kind.id}")


class SettingsPage(Controller):
    """The settings page and its forms."""

    path = "/settings"

    @get("/")
    async def settings(self, caller: NamedDependency[Caller]) -> Html:
        return await _settings_page(caller)

    @post("/registries")
    async def add_registry(
        self,
        caller: NamedDependency[Caller],
        data: URLEncodedBody[RegistryForm],
    ) -> Response[Any]:
        return await _add_saved_per_host(caller, REGISTRIES, *parse_registry_form(data))

    remove_registry = removal_route(
        "/registries/{item_id:str}/delete",
        REGISTRIES.removal(
            c.ListRegistries(), "Registry", lambda saved: c.RemoveRegistry(registry_id=saved.id)
        ),
    )

    @post("/git-credentials")
    async def add_git_credential(
        self,
        caller: NamedDependency[Caller],
        data: URLEncodedBody[GitCredentialForm],
    ) -> Response[Any]:
        return await _add_saved_per_host(caller, GIT_HOSTS, *parse_git_credential_form(data))

    remove_git_credential = removal_route(
        "/git-credentials/{item_id:str}/delete",
        GIT_HOSTS.removal(
            c.ListGitCredentials(),
            "Git credentials",
            lambda saved: c.RemoveGitCredential(git_credential_id=saved.id),
        ),
    )

    @post("/webhooks")
    async def add_webhook(
        self,
        caller: NamedDependency[Caller],
        data: URLEncodedBody[WebhookForm],
    ) -> Response[Any]:
        shown, command = parse_webhook_form(data)
        if command is None:
            return await _settings_page(caller, status=422, webhook_form=shown)
        try:
            created = await caller(command)
        except InvalidInput as exc:  # where its host resolves to
            shown.place(exc.errors, ("url",))
            return await _settings_page(caller, status=422, webhook_form=shown)
        except Conflict as exc:
            shown.errors["form"] = exc.detail
            return await _settings_page(caller, status=409, webhook_form=shown)
        return await _settings_page(
            caller, status=201, new_webhook=created, replace_url="/settings#notifications"
        )

    @post("/webhooks/{webhook_id:str}/test")
    async def test_webhook(
        self,
        caller: NamedDependency[Caller],
        webhook_id: FromPath[str],
        data: URLEncodedBody[ConfirmForm],
    ) -> Html:
        """Send the webhook a test event now; the page says how its endpoint answered."""
        wid = uuid_or_404(webhook_id, "Webhook")
        tested = await caller(c.SendTestWebhook(webhook_id=wid))
        return await _settings_page(caller, tested=tested, replace_url="/settings#notifications")

    remove_webhook = removal_route(
        "/webhooks/{item_id:str}/delete",
        Removal(
            listing=c.ListWebhooks(),
            what="Webhook",
            title=lambda hook: f"Remove the notification to {hook.url}?",
            message="Nothing more is sent to it, retries included.",
            button="Remove notification",
            back="/settings#notifications",
            command=lambda hook: c.DeleteWebhook(webhook_id=hook.id),
            done="/settings?done=webhook-removed#notifications",
        ),
    )

    @post("/token")
    async def token(
        self,
        caller: NamedDependency[Caller],
        data: URLEncodedBody[ConfirmForm],
    ) -> Html:
        current = await caller(c.TokenInfo())
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
        new_token = await caller(c.RegenerateToken())
        return await _settings_page(
            caller, status=201, new_token=new_token, replace_url="/settings"
        )

    @get("/token")
    async def token_address(self) -> SeeOther:
        """The address a new token's page stood at: reached again (reload, back, a link),
        it is the settings page, never a form sent twice nor a bare 405."""
        return SeeOther("/settings")
