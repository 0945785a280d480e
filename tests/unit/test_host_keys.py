"""Host-key re-pinning (``RepinHostKeys`` through the bus) and the fingerprint rule."""

from __future__ import annotations

import base64
import hashlib
import subprocess
from pathlib import Path

import msgspec
import pytest
from berth.core import commands as c
from berth.core.errors import Conflict, InvalidInput, NotFound
from berth.core.models import Server, ServerStatus, User
from berth.core.types import RuleError, check_fingerprint, host_key_fingerprint
from berth.facade import Berth
from hypothesis import given
from hypothesis import strategies as st
from wiring import App

KEY_OLD = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"
KEY_NEW = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKnyPSfYoTxNnR+yO+MMH6s8XGxKu4BCThQ5SOuwmplU"


def _mismatch(app: App, server: Server, offered: str = KEY_NEW) -> Server:
    """Put the server where the monitor leaves it when another key is offered."""
    changed = msgspec.structs.replace(
        server,
        status=ServerStatus.HOST_KEY_MISMATCH,
        status_detail="Host key mismatch: …",
        host_keys=(KEY_OLD,),
        offered_host_key=offered,
    )
    app.store.state.servers[server.id] = changed
    return changed


def _repin(server: Server, keys: list[str], fingerprint: str) -> c.RepinHostKeys:
    return c.parse_repin({"host_keys": keys, "fingerprint": fingerprint}, server.id)


class TestFingerprint:
    def test_matches_ssh_keygen(self, tmp_path: Path) -> None:
        """The fingerprint is the one `ssh-keygen -lf` prints."""
        path = tmp_path / "key.pub"
        path.write_text(KEY_NEW + " comment\n")
        printed = subprocess.run(
            ["ssh-keygen", "-lf", str(path)], check=True, capture_output=True, text=True
        ).stdout.split()[1]
        assert host_key_fingerprint(KEY_NEW) == printed

    @given(st.binary(min_size=1, max_size=600))
    def test_is_the_unpadded_base64_sha256_of_the_blob(self, blob: bytes) -> None:
        """Any blob: SHA256: + unpadded base64 of its SHA-256, which the checker accepts."""
        line = "ssh-ed25519 " + base64.b64encode(blob).decode()
        found = host_key_fingerprint(line)
        digest = base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")
        assert found == f"SHA256:{digest}"
        assert check_fingerprint(found) == found

    @pytest.mark.parametrize(
        "value",
        ["", "SHA256:", "MD5:aa:bb", "SHA256:" + "A" * 42, "SHA256:" + "A" * 44, 7, None],
    )
    def test_refuses_what_is_no_sha256_fingerprint(self, value: object) -> None:
        """Anything but SHA256: and 43 base64 characters is refused."""
        with pytest.raises(RuleError):
            check_fingerprint(value)


class TestRepinHostKeys:
    async def test_pins_the_offered_key_once_confirmed(
        self, app: App, owner: User, server: Server
    ) -> None:
        """With the offered key and its fingerprint, the keys are pinned and the server
        goes offline (the monitor reconnects), its pooled connection dropped."""
        _mismatch(app, server)
        result = await app.bus.handle(
            _repin(server, [KEY_NEW], host_key_fingerprint(KEY_NEW)), owner
        )
        stored = app.store.state.servers[server.id]
        assert result.status is ServerStatus.OFFLINE
        assert stored.status is ServerStatus.OFFLINE
        assert stored.host_keys == (KEY_NEW,)
        assert stored.offered_host_key is None
        assert server.id in app.gateway.disconnected

    async def test_another_fingerprint_is_refused_naming_it(
        self, app: App, owner: User, server: Server
    ) -> None:
        """A fingerprint other than the offered key's is a conflict on `fingerprint`;
        nothing changes."""
        _mismatch(app, server)
        with pytest.raises(Conflict) as caught:
            await app.bus.handle(_repin(server, [KEY_NEW], host_key_fingerprint(KEY_OLD)), owner)
        assert caught.value.kind == "fingerprint-mismatch"
        assert caught.value.field == "fingerprint"
        assert app.store.state.servers[server.id].host_keys == (KEY_OLD,)

    async def test_keys_without_the_offered_one_are_refused(
        self, app: App, owner: User, server: Server
    ) -> None:
        """Keys that leave out the offered key are a conflict on `host_keys`."""
        _mismatch(app, server)
        with pytest.raises(Conflict) as caught:
            await app.bus.handle(_repin(server, [KEY_OLD], host_key_fingerprint(KEY_NEW)), owner)
        assert caught.value.field == "host_keys"
        assert app.store.state.servers[server.id].status is ServerStatus.HOST_KEY_MISMATCH

    async def test_a_server_that_offered_nothing_new_is_a_conflict(
        self, app: App, owner: User, server: Server
    ) -> None:
        """Without a mismatch there is nothing to confirm: 409, keys unchanged."""
        before = app.store.state.servers[server.id].host_keys
        with pytest.raises(Conflict) as caught:
            await app.bus.handle(_repin(server, [KEY_NEW], host_key_fingerprint(KEY_NEW)), owner)
        assert caught.value.kind == "no-host-key-change"
        assert app.store.state.servers[server.id].host_keys == before

    async def test_another_users_server_is_not_found(
        self, app: App, server: Server, make_user: object
    ) -> None:
        """Someone else's server is NotFound, and nothing is pinned."""
        stranger = await make_user()  # type: ignore[operator]
        _mismatch(app, server)
        with pytest.raises(NotFound):
            await app.bus.handle(_repin(server, [KEY_NEW], host_key_fingerprint(KEY_NEW)), stranger)
        assert app.store.state.servers[server.id].host_keys == (KEY_OLD,)

    def test_bad_input_names_every_field(self, server: Server) -> None:
        """Bad keys and a bad fingerprint are reported together, with unknown fields."""
        with pytest.raises(InvalidInput) as caught:
            c.parse_repin({"host_keys": ["nope"], "fingerprint": "md5", "x": 1}, server.id)
        assert {e.location for e in caught.value.errors} == {"host_keys", "fingerprint", "x"}

    async def test_deploying_to_a_mismatch_server_is_refused_at_once(
        self, app: App, owner: User, server: Server
    ) -> None:
        """A deploy to a server in host_key_mismatch is a 409 host-key-mismatch."""
        _mismatch(app, server)
        cmd = c.parse_deploy({"server_id": str(server.id), "name": "web", "image": "nginx:1.27"})
        with pytest.raises(Conflict) as caught:
            await app.bus.handle(cmd, owner)
        assert caught.value.kind == "host-key-mismatch"


class TestLibrary:
    async def test_repin_through_the_facade(self, app: App, owner: User, server: Server) -> None:
        """``Berth.repin_host_keys`` takes the same path: a bad fingerprint is
        InvalidInput at ``fingerprint``, the right one pins the offered key."""
        facade = Berth(app.bus)
        _mismatch(app, server)
        with pytest.raises(InvalidInput) as caught:
            await facade.repin_host_keys(owner, server.id, host_keys=[KEY_NEW], fingerprint="x")
        assert [e.location for e in caught.value.errors] == ["fingerprint"]
        pinned = await facade.repin_host_keys(
            owner, str(server.id), host_keys=[KEY_NEW], fingerprint=host_key_fingerprint(KEY_NEW)
        )
        assert pinned.host_keys == (KEY_NEW,)
        assert pinned.status is ServerStatus.OFFLINE
