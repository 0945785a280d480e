"""Credentials saved per host, both kinds (private registries, Git hosts), through the
bus over the fakes: sealed, listed without the password, one per host, at most the
kind's limit, another team's not found, every broken field named, audited."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from uuid import UUID, uuid4

import msgspec
import pytest
from berth.core import commands as c
from berth.core.errors import Conflict, InvalidInput, NotFound
from berth.core.models import RegistryAuth, User
from berth.core.use_cases.git_credentials import GIT_CREDENTIALS_MAX
from berth.core.use_cases.registries import REGISTRIES_MAX
from wiring import App


@dataclass(frozen=True)
class Kind:
    """One kind as the tests drive it: its commands, its store and its words."""

    name: str  # the audit log's kind and the problems' prefix
    parse: Callable[[object], c.AddHostCredentials[Any]]
    add: type[c.AddHostCredentials[Any]]
    listing: c.Command[Any]
    remove: Callable[[UUID], c.Command[None]]
    repository: str  # the unit of work's, and the fake state's
    most: int
    host: str  # a host it accepts, as typed
    auth: Callable[[str, str, str], object]  # (host, user, password): what ``auth`` gives


KINDS = [
    Kind(
        name="registry",
        parse=c.parse_add_registry,
        add=c.AddRegistry,
        listing=c.ListRegistries(),
        remove=lambda saved: c.RemoveRegistry(registry_id=saved),
        repository="registries",
        most=REGISTRIES_MAX,
        host="Registry.Example.com:5000",
        auth=lambda host, user, password: RegistryAuth(host=host, username=user, password=password),
    ),
    Kind(
        name="git-credential",
        parse=c.parse_add_git_credential,
        add=c.AddGitCredential,
        listing=c.ListGitCredentials(),
        remove=lambda saved: c.RemoveGitCredential(git_credential_id=saved),
        repository="git_credentials",
        most=GIT_CREDENTIALS_MAX,
        host="Git.Example.com:3000",
        auth=lambda host, user, password: (user, password),
    ),
]


@pytest.fixture(params=KINDS, ids=[k.name for k in KINDS])
def kind(request: pytest.FixtureRequest) -> Kind:
    found: Kind = request.param
    return found


async def test_saved_sealed_and_listed_without_the_password(
    app: App, owner: User, kind: Kind
) -> None:
    """The host is lowercased, the password stored sealed; the list has host and user name
    only; the repository's ``auth`` unseals it for that host."""
    raw = {"host": kind.host, "username": "bot", "password": "s3cret-token"}
    saved = await app.bus.handle(kind.parse(raw), owner)
    assert saved.host == kind.host.lower()
    listed = await app.bus.handle(kind.listing, owner)
    assert listed == [saved]
    assert b"s3cret-token" not in msgspec.json.encode(listed)
    [(_, sealed)] = getattr(app.store.state, kind.repository).values()
    assert b"s3cret-token" not in sealed
    async with app.uow() as uow:
        unsealed = await getattr(uow, kind.repository).auth(owner.id, saved.host)
    assert unsealed == kind.auth(saved.host, "bot", "s3cret-token")


async def test_one_entry_per_host(app: App, owner: User, kind: Kind) -> None:
    """A second entry for the same host is a Conflict (``<kind>-exists``, at ``host``);
    nothing is added."""
    await app.bus.handle(kind.add(host="h.example.com", username="bot", password="one"), owner)
    with pytest.raises(Conflict) as exc:
        await app.bus.handle(kind.add(host="h.example.com", username="x", password="two"), owner)
    assert (exc.value.kind, exc.value.field) == (f"{kind.name}-exists", "host")
    assert len(await app.bus.handle(kind.listing, owner)) == 1


async def test_at_most_the_limit(app: App, owner: User, kind: Kind) -> None:
    """Past the kind's limit a team gets a Conflict (``<kind>-limit``)."""
    for i in range(kind.most):
        await app.bus.handle(kind.add(host=f"r{i}.example.com", username="u", password="p"), owner)
    with pytest.raises(Conflict) as exc:
        await app.bus.handle(
            kind.add(host="one-more.example.com", username="u", password="p"), owner
        )
    assert exc.value.kind == f"{kind.name}-limit"


async def test_another_teams_are_not_found(
    app: App, owner: User, make_user: Callable[[], Awaitable[User]], kind: Kind
) -> None:
    """Another user neither sees nor removes one's credentials, and may save the same host;
    an id that names none is not found either."""
    other = await make_user()
    saved = await app.bus.handle(kind.add(host="h.example.com", username="a", password="p"), owner)
    assert await app.bus.handle(kind.listing, other) == []
    with pytest.raises(NotFound):
        await app.bus.handle(kind.remove(saved.id), other)
    await app.bus.handle(kind.add(host="h.example.com", username="b", password="q"), other)
    await app.bus.handle(kind.remove(saved.id), owner)
    assert await app.bus.handle(kind.listing, owner) == []
    with pytest.raises(NotFound):
        await app.bus.handle(kind.remove(uuid4()), owner)


async def test_adding_and_removing_are_audited(app: App, owner: User, kind: Kind) -> None:
    """The team's audit log names the kind's actions on the entry (its host when added)."""
    saved = await app.bus.handle(kind.add(host="h.example.com", username="a", password="p"), owner)
    await app.bus.handle(kind.remove(saved.id), owner)
    async with app.uow() as uow:
        entries = await uow.audit.page(owner.id, 50)
    ours = [(e.action, e.target.type, e.target.id) for e in entries if e.target.id == str(saved.id)]
    assert sorted(ours) == [
        (f"{kind.name}.add", kind.name, str(saved.id)),
        (f"{kind.name}.remove", kind.name, str(saved.id)),
    ]


def test_every_broken_field_at_once_never_echoing_the_password(kind: Kind) -> None:
    """Every bad field is named (an unknown one too); the password's error carries no
    value, whatever was sent in its place."""
    raw = {"host": "ftp://x/y", "username": "", "password": 7, "x": 1}
    with pytest.raises(InvalidInput) as exc:
        kind.parse(raw)
    assert {e.location for e in exc.value.errors} == {"host", "username", "password", "x"}
    assert [e.value for e in exc.value.errors if e.location == "password"] == [None]


def test_the_password_is_not_in_the_commands_repr(kind: Kind) -> None:
    """The add command, printed, shows the host and user name, never the password."""
    cmd = kind.add(host="h.example.com", username="bot", password="s3cret-token")
    for shown in (repr(cmd), str(cmd), repr([cmd])):
        assert "s3cret-token" not in shown
        assert "h.example.com" in shown
