"""``POST`` and ``GET /api/agent/servers/enroll``: the install script's routes, over HTTP
against a real ``berth serve`` (SQLite), every answer checked against the OpenAPI document."""

from __future__ import annotations

import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from harness import Api, BerthProcess, new_server, problem
from install_support import expire_enrollment

pytestmark = pytest.mark.integration

PATH = "/api/agent/servers/enroll"
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"
OTHER_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHhrIFB7HL8lCEpUrZ2zMm3T9eZEzSPkNR1ElUZGHUgG"
FACTS = {
    "os": "Debian GNU/Linux 12 (bookworm)",
    "arch": "x86_64",
    "dockerVersion": "20.10.24+dfsg1",
    "cpus": 2,
    "memoryBytes": 4 * 2**30,
}


@pytest.fixture(scope="module")
def owner(berth: BerthProcess) -> Api:
    """A user of the shared berth, with an API token."""
    _, token = berth.new_users(1, "enroller")[0]
    return berth.api(token)


@pytest.fixture
def anonymous(berth: BerthProcess) -> Api:
    """A client without a default token (each request brings its own header)."""
    return berth.api()


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def enroll(api: Api, token: str, **body: Any) -> Any:
    return api.post(PATH, headers=bearer(token), json={"hostKeys": [KEY + " root@web"], **body})


class TestEnroll:
    def test_pins_keys_records_facts_and_the_address_it_came_from(
        self, owner: Api, anonymous: Api
    ) -> None:
        """Enrolled: keys pinned, facts and port recorded, address from the request, offline
        (``checking`` with ``lastKnownStatus`` offline until the monitor's first check)."""
        server = new_server(owner, enrolled=False)
        assert server["status"] == "pending"
        response = enroll(anonymous, server["enrollmentToken"], sshPort=2222, facts=FACTS)
        assert response.status_code == 200, response.text
        assert response.json() == {
            "serverId": server["id"],
            "sshUser": "berth",
            "publicKey": server["publicKey"],
            "authorizedKeysLine": server["authorizedKeysLine"],
            "status": "offline",
        }
        stored = owner.get(f"/api/agent/servers/{server['id']}").json()
        assert stored["hostKeys"] == [KEY]
        assert stored["facts"] == FACTS
        assert stored["sshPort"] == 2222
        assert stored["address"] == "127.0.0.1"
        assert (stored["lastKnownStatus"] or stored["status"]) == "offline"
        assert stored["status"] in ("checking", "offline")

    def test_the_address_the_user_gave_stays(self, owner: Api, anonymous: Api) -> None:
        """A server created with an address keeps it; the port stays without sshPort."""
        server = new_server(owner, enrolled=False, address="203.0.113.7", sshPort=2200)
        assert enroll(anonymous, server["enrollmentToken"]).status_code == 200
        stored = owner.get(f"/api/agent/servers/{server['id']}").json()
        assert (stored["address"], stored["sshPort"]) == ("203.0.113.7", 2200)

    def test_a_port_the_user_gave_is_not_replaced(self, owner: Api, anonymous: Api) -> None:
        """Added with sshPort 2200: an enrollment reporting 2222 is a 409 naming sshPort,
        nothing is written (still pending); reporting 2200 enrolls."""
        server = new_server(owner, enrolled=False, sshPort=2200)
        assert server["installCommand"].endswith(" sh -s -- --ssh-port 2200")
        body = problem(enroll(anonymous, server["enrollmentToken"], sshPort=2222), 409)
        assert "added with SSH port 2200" in body["detail"]
        assert [e["location"] for e in body.get("errors", [])] in ([], ["body.sshPort"])
        stored = owner.get(f"/api/agent/servers/{server['id']}").json()
        assert (stored["status"], stored["sshPort"]) == ("pending", 2200)
        assert enroll(anonymous, server["enrollmentToken"], sshPort=2200).status_code == 200
        assert owner.get(f"/api/agent/servers/{server['id']}").json()["sshPort"] == 2200

    def test_a_used_token_gets_401_and_the_first_keys_stay(
        self, owner: Api, anonymous: Api
    ) -> None:
        """The second enrollment is a 401 that says why; nothing changes."""
        server = new_server(owner, enrolled=False)
        assert enroll(anonymous, server["enrollmentToken"]).status_code == 200
        again = anonymous.post(
            PATH, headers=bearer(server["enrollmentToken"]), json={"hostKeys": [OTHER_KEY]}
        )
        body = problem(again, 401)
        assert again.headers["www-authenticate"] == "Bearer"
        assert "already used" in body["detail"]
        stored = owner.get(f"/api/agent/servers/{server['id']}").json()
        assert stored["hostKeys"] == [KEY]

    def test_an_expired_token_gets_401(
        self, berth: BerthProcess, owner: Api, anonymous: Api
    ) -> None:
        """Past its hour the token neither enrolls nor reads the status."""
        server = new_server(owner, enrolled=False)
        expire_enrollment(berth, server["id"])
        problem(enroll(anonymous, server["enrollmentToken"]), 401)
        problem(anonymous.get(PATH, headers=bearer(server["enrollmentToken"])), 401)
        assert owner.get(f"/api/agent/servers/{server['id']}").json()["status"] == "pending"

    def test_a_server_created_with_host_keys_is_already_enrolled(
        self, owner: Api, anonymous: Api
    ) -> None:
        """Its token cannot replace the keys the user pinned."""
        server = new_server(owner, address="203.0.113.8", hostKeys=[KEY])
        problem(anonymous.post(PATH, headers=bearer(server["enrollmentToken"]),
                               json={"hostKeys": [OTHER_KEY]}), 401)  # fmt: skip

    @pytest.mark.parametrize(
        "authorization",
        [
            None,
            "Bearer",
            "Basic dXNlcjpwYXNz",
            "Bearer berth_enroll_tooShort",
            "Bearer berth_enroll_" + "A" * 49,  # well formed shape, bad checksum
        ],
    )
    def test_missing_or_malformed_tokens_get_401(
        self, anonymous: Api, authorization: str | None
    ) -> None:
        """No usable enrollment token: 401 with WWW-Authenticate: Bearer."""
        headers = {"Authorization": authorization} if authorization else {}
        response = anonymous.post(PATH, headers=headers, json={"hostKeys": [KEY]})
        problem(response, 401)
        assert response.headers["www-authenticate"] == "Bearer"

    def test_an_api_token_cannot_enroll(self, berth: BerthProcess, owner: Api) -> None:
        """The owner's API token is refused here."""
        new_server(owner, enrolled=False)
        token = owner.headers["authorization"].split()[1]
        problem(enroll(berth.api(), token), 401)

    def test_an_enrollment_token_opens_nothing_else(self, owner: Api, anonymous: Api) -> None:
        """With the enrollment token, the API's own routes answer 401."""
        server = new_server(owner, enrolled=False)
        token = server["enrollmentToken"]
        for path in ("/api/agent/servers", f"/api/agent/servers/{server['id']}"):
            problem(anonymous.get(path, headers=bearer(token)), 401)

    def test_every_body_error_at_once(self, owner: Api, anonymous: Api) -> None:
        """Bad keys, a string port, unknown fields and bad facts: one 422 listing each."""
        server = new_server(owner, enrolled=False)
        response = anonymous.post(
            PATH,
            headers=bearer(server["enrollmentToken"]),
            json={
                "hostKeys": ["ssh-dss AAAA"],
                "sshPort": "22",
                "facts": {"cpus": "2", "kernel": "6.1"},
                "name": "x",
            },
        )
        body = problem(response, 422)
        assert {e["location"] for e in body["errors"]} == {
            "body.name",
            "body.hostKeys",
            "body.sshPort",
            "body.facts.kernel",
            "body.facts.cpus",
        }
        assert owner.get(f"/api/agent/servers/{server['id']}").json()["status"] == "pending"

    def test_media_type_and_json_errors(self, owner: Api, anonymous: Api) -> None:
        """Not JSON: 415; malformed JSON: 400; a bad token comes first: 401."""
        server = new_server(owner, enrolled=False)
        headers = bearer(server["enrollmentToken"])
        problem(anonymous.post(PATH, headers=headers, content=b"{}"), 415)
        problem(
            anonymous.post(
                PATH, headers={**headers, "Content-Type": "application/json"}, content=b"{"
            ),
            400,
        )
        problem(anonymous.post(PATH, headers=bearer("nope"), content=b"{"), 401)


class TestStatus:
    def test_reads_only_id_status_and_detail(self, owner: Api, anonymous: Api) -> None:
        """Pending: the id, status and port, nothing else; once the token is used, 401."""
        server = new_server(owner, enrolled=False)
        token = server["enrollmentToken"]
        first = anonymous.get(PATH, headers=bearer(token))
        assert first.status_code == 200
        assert first.json() == {
            "serverId": server["id"],
            "status": "pending",
            "statusDetail": None,
            "sshPort": 22,
        }
        assert enroll(anonymous, token).status_code == 200
        body = problem(anonymous.get(PATH, headers=bearer(token)), 401)
        assert server["id"] not in str(body)

    def test_an_unknown_token_reads_nothing(self, anonymous: Api) -> None:
        """A token of no server: 401."""
        from berth.core import tokens

        problem(anonymous.get(PATH, headers=bearer(tokens.generate(tokens.ENROLL_PREFIX))), 401)


class TestServerSelf:
    """``/api/agent/servers/self``: requests the server signs with its SSH host key
    (``ssh-keygen -Y sign``, as the install script does), over HTTP."""

    SELF = "/api/agent/servers/self"

    @pytest.fixture
    def host_key(self, tmp_path: Path) -> tuple[Path, str]:
        """A host key file and its public line, as ``/etc/ssh/ssh_host_ed25519_key``."""
        path = tmp_path / "ssh_host_ed25519_key"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
        public = " ".join(path.with_suffix(".pub").read_text().split()[:2])
        return path, public

    def sign(self, key: Path, method: str, path: str, server_id: str, at: int) -> str:
        """The bearer credential for one request, made by ``ssh-keygen -Y sign``."""
        message = key.parent / f"request-{uuid.uuid4().hex}"
        message.write_text(f"berth-server-request\n{method}\n{path}\n{server_id}\n{at}\n")
        subprocess.run(
            ["ssh-keygen", "-Y", "sign", "-q", "-f", str(key), "-n", "berth-server@berth",
             str(message)],
            check=True,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
        armored = Path(f"{message}.sig").read_text().splitlines()
        return f"berth_sig.{server_id}.{at}.{''.join(armored[1:-1])}"

    def test_status_then_uninstall(
        self, owner: Api, anonymous: Api, host_key: tuple[Path, str]
    ) -> None:
        """Signed with the pinned key: the status; the uninstall report makes the server
        ``removed`` and a deploy to it a 409 ``server-removed``."""
        key, public = host_key
        server = new_server(owner, enrolled=False)
        assert enroll(anonymous, server["enrollmentToken"], hostKeys=[public]).status_code == 200
        now = int(time.time())
        status = anonymous.get(
            self.SELF, headers=bearer(self.sign(key, "GET", self.SELF, server["id"], now))
        )
        assert status.status_code == 200, status.text
        assert status.json()["serverId"] == server["id"]
        assert status.json()["status"] in ("offline", "online")
        path = f"{self.SELF}/uninstall"
        done = anonymous.post(path, headers=bearer(self.sign(key, "POST", path, server["id"], now)))
        assert done.status_code == 200, done.text
        assert done.json()["status"] == "removed"
        assert owner.get(f"/api/agent/servers/{server['id']}").json()["status"] == "removed"
        refused = owner.post(
            "/api/agent/docker/deploy",
            json={"serverId": server["id"], "name": "web", "image": "nginx:1", "port": 8080},
        )
        assert problem(refused, 409)["type"] == "urn:berth:problem:server-removed"

    def test_refusals(self, owner: Api, anonymous: Api, host_key: tuple[Path, str]) -> None:
        """Another key, another path, a stale time, junk, the enrollment token or an API
        token: 401 with WWW-Authenticate: Bearer; the server is untouched."""
        key, public = host_key
        server = new_server(owner, enrolled=False)
        token = server["enrollmentToken"]
        assert enroll(anonymous, token, hostKeys=[public]).status_code == 200
        path = f"{self.SELF}/uninstall"
        now = int(time.time())
        other = key.parent / "other_key"
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True
        )
        api_token = owner.headers["authorization"].split()[1]
        for credential in (
            self.sign(other, "POST", path, server["id"], now),
            self.sign(key, "POST", self.SELF, server["id"], now),
            self.sign(key, "POST", path, server["id"], now - 600),
            f"berth_sig.{server['id']}.{now}.AAAA",
            "berth_sig.x.y.z",
            token,
            api_token,
        ):
            response = anonymous.post(path, headers=bearer(credential))
            problem(response, 401)
            assert response.headers["www-authenticate"] == "Bearer"
        assert owner.get(f"/api/agent/servers/{server['id']}").json()["status"] != "removed"


class TestNewEnrollmentToken:
    """``POST /api/agent/servers/{serverId}/enrollment-token``: a lost or expired install
    command of a pending server, replaced."""

    def test_a_new_token_enrolls_and_the_old_one_is_refused(
        self, owner: Api, anonymous: Api
    ) -> None:
        """The answer has createServer's token fields and install command; the first token
        then enrolls nothing (401) and the new one enrolls."""
        server = new_server(owner, enrolled=False)
        response = owner.post(f"/api/agent/servers/{server['id']}/enrollment-token")
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["id"] == server["id"]
        assert body["status"] == "pending"
        assert body["enrollmentToken"] != server["enrollmentToken"]
        assert body["enrollmentToken"] in body["installCommand"]
        assert body["enrollmentExpiresAt"] >= server["enrollmentExpiresAt"]
        problem(enroll(anonymous, server["enrollmentToken"]), 401)
        assert enroll(anonymous, body["enrollmentToken"]).status_code == 200

    def test_an_enrolled_server_is_a_409_and_keeps_its_keys(
        self, owner: Api, anonymous: Api
    ) -> None:
        """Once enrolled: 409 server-not-pending; its token stays used, its keys pinned."""
        server = new_server(owner, enrolled=False)
        assert enroll(anonymous, server["enrollmentToken"]).status_code == 200
        body = problem(owner.post(f"/api/agent/servers/{server['id']}/enrollment-token"), 409)
        assert body["type"].endswith("server-not-pending")
        assert owner.get(f"/api/agent/servers/{server['id']}").json()["hostKeys"] == [KEY]

    def test_another_users_or_a_missing_server_is_a_404(
        self, owner: Api, berth: BerthProcess
    ) -> None:
        """Another user's pending server is a 404 with the body of a missing one."""
        server = new_server(owner, enrolled=False)
        _, token = berth.new_users(1, "stranger")[0]
        stranger = berth.api(token)
        theirs = problem(stranger.post(f"/api/agent/servers/{server['id']}/enrollment-token"), 404)
        missing = problem(stranger.post(f"/api/agent/servers/{uuid.uuid4()}/enrollment-token"), 404)
        assert theirs["detail"] == missing["detail"]
        problem(stranger.post("/api/agent/servers/not-a-uuid/enrollment-token"), 404)
