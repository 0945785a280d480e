"""Settings: the API token (its first characters and last use; generate or regenerate),
private registries' and private Git repositories' credentials (list, add, remove) and
notifications: webhooks, in Slack's, Discord's or the standard format (list, add, remove,
send a test)."""

from __future__ import annotations

from typing import Any

from berth.core import commands as c
from berth.core.access import Actor
from berth.core.bus import MessageBus
from berth.core.errors import Conflict, InvalidInput
from berth.core.models import WebhookEvent, WebhookFormat
from berth.core.results import WebhookTestResult
from litestar import Controller, Response, get, post
from litestar.di import NamedDependency
from litestar.params import FromPath, URLEncodedBody

from .confirming import Ask, confirm_then_act, one_of
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


async def _settings_page(
    bus: MessageBus,
    user: Actor,
    *,
    status: int = 200,
    new_token: str | None = None,
    registry_form: RegistryForm | None = None,
    git_form: GitCredentialForm | None = None,
    webhook_form: WebhookForm | None = None,
    new_webhook: Any = None,
    tested: WebhookTestResult | None = None,
    replace_url: str | None = None,
) -> Html:
    return Html(
        "settings.html",
        status_code=status,
        token=await bus.handle(c.TokenInfo(), user),
        new_token=new_token,
        registries=await bus.handle(c.ListRegistries(), user),
        registry_form=registry_form or RegistryForm(),
        git_credentials=await bus.handle(c.ListGitCredentials(), user),
        git_form=git_form or GitCredentialForm(),
        webhooks=await bus.handle(c.ListWebhooks(), user),
        webhook_form=webhook_form or WebhookForm(event=["deployment.failed", "server.offline"]),
        new_webhook=new_webhook,
        tested=tested,
        event_words=EVENT_WORDS,
        formats=[f.value for f in WebhookFormat],
        replace_url=replace_url,
    )


class SettingsPage(Controller):
    """The settings page and its forms."""

    path = "/settings"

    @get("/")
    async def settings(
        self, bus: NamedDependency[MessageBus], user: NamedDependency[Actor]
    ) -> Html:
        return await _settings_page(bus, user)

    @post("/registries")
    async def add_registry(
        self,
        bus: NamedDependency[MessageBus],
        user: NamedDependency[Actor],
        data: URLEncodedBody[RegistryForm],
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
        self,
        bus: NamedDependency[MessageBus],
        user: NamedDependency[Actor],
        registry_id: FromPath[str],
        data: URLEncodedBody[ConfirmForm],
    ) -> Response[Any]:
        registry = await one_of(bus, user, c.ListRegistries(), registry_id, "Registry")
        ask = Ask(
            data,
            title=f"Remove the credentials for {registry.host}?",
            message="Deploys of images from this registry pull without credentials from now on.",
            button="Remove registry",
            back="/settings#registries",
        )
        removal = c.RemoveRegistry(registry_id=registry.id)
        done = "/settings?done=registry-removed#registries"
        return await confirm_then_act(bus, user, removal, done, ask=ask)

    @post("/git-credentials")
    async def add_git_credential(
        self,
        bus: NamedDependency[MessageBus],
        user: NamedDependency[Actor],
        data: URLEncodedBody[GitCredentialForm],
    ) -> Response[Any]:
        shown, command = parse_git_credential_form(data)
        if command is None:
            return await _settings_page(bus, user, status=422, git_form=shown)
        try:
            await bus.handle(command, user)
        except Conflict as exc:
            shown.errors["git_host"] = exc.detail
            return await _settings_page(bus, user, status=409, git_form=shown)
        return SeeOther("/settings?done=git-credential-added#git-credentials")

    @post("/git-credentials/{credential_id:str}/delete")
    async def remove_git_credential(
        self,
        bus: NamedDependency[MessageBus],
        user: NamedDependency[Actor],
        credential_id: FromPath[str],
        data: URLEncodedBody[ConfirmForm],
    ) -> Response[Any]:
        credential = await one_of(
            bus, user, c.ListGitCredentials(), credential_id, "Git credentials"
        )
        ask = Ask(
            data,
            title=f"Remove the credentials for {credential.host}?",
            message="Builds from its repositories fetch without credentials from now on.",
            button="Remove credentials",
            back="/settings#git-credentials",
        )
        removal = c.RemoveGitCredential(git_credential_id=credential.id)
        done = "/settings?done=git-credential-removed#git-credentials"
        return await confirm_then_act(bus, user, removal, done, ask=ask)

    @post("/webhooks")
    async def add_webhook(
        self,
        bus: NamedDependency[MessageBus],
        user: NamedDependency[Actor],
        data: URLEncodedBody[WebhookForm],
    ) -> Response[Any]:
        shown, command = parse_webhook_form(data)
        if command is None:
            return await _settings_page(bus, user, status=422, webhook_form=shown)
        try:
            created = await bus.handle(command, user)
        except InvalidInput as exc:  # where its host resolves to
            shown.place(exc.errors, ("url",))
            return await _settings_page(bus, user, status=422, webhook_form=shown)
        except Conflict as exc:
            shown.errors["form"] = exc.detail
            return await _settings_page(bus, user, status=409, webhook_form=shown)
        return await _settings_page(
            bus, user, status=201, new_webhook=created, replace_url="/settings#notifications"
        )

    @post("/webhooks/{webhook_id:str}/test")
    async def test_webhook(
        self,
        bus: NamedDependency[MessageBus],
        user: NamedDependency[Actor],
        webhook_id: FromPath[str],
        data: URLEncodedBody[ConfirmForm],
    ) -> Html:
        """Send the webhook a test event now; the page says how its endpoint answered."""
        wid = uuid_or_404(webhook_id, "Webhook")
        tested = await bus.handle(c.SendTestWebhook(webhook_id=wid), user)
        return await _settings_page(bus, user, tested=tested, replace_url="/settings#notifications")

    @post("/webhooks/{webhook_id:str}/delete")
    async def remove_webhook(
        self,
        bus: NamedDependency[MessageBus],
        user: NamedDependency[Actor],
        webhook_id: FromPath[str],
        data: URLEncodedBody[ConfirmForm],
    ) -> Response[Any]:
        hook = await one_of(bus, user, c.ListWebhooks(), webhook_id, "Webhook")
        ask = Ask(
            data,
            title=f"Remove the notification to {hook.url}?",
            message="Nothing more is sent to it, retries included.",
            button="Remove notification",
            back="/settings#notifications",
        )
        removal = c.DeleteWebhook(webhook_id=hook.id)
        done = "/settings?done=webhook-removed#notifications"
        return await confirm_then_act(bus, user, removal, done, ask=ask)

    @post("/token")
    async def token(
        self,
        bus: NamedDependency[MessageBus],
        user: NamedDependency[Actor],
        data: URLEncodedBody[ConfirmForm],
    ) -> Html:
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
