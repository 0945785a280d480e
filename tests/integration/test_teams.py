"""Teams, roles and scoped tokens through the API of a running ``berth serve``.

Two users: the owner makes a team, invites the other, who accepts; tokens of each
role and scope are made and used; refusals are 403 ``insufficient-scope`` and are in
the team's audit log; hostile input is a 422 naming every field, or a 404.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from harness import BerthProcess, new_server, problem


def _token(berth: BerthProcess, main: str, **body: Any) -> dict[str, Any]:
    with berth.api(main) as api:
        made = api.post("/api/agent/tokens", json=body)
    assert made.status_code == 201, made.text
    result: dict[str, Any] = made.json()
    return result


@pytest.fixture(scope="module")
def team(berth: BerthProcess) -> dict[str, Any]:
    """Alice owns a team with a server; Bob joined it through an invitation."""
    (alice_email, alice), (bob_email, bob) = berth.new_users(2, "team")
    with berth.api(alice) as api:
        made = api.post("/api/agent/teams", json={"name": "ops"})
        assert made.status_code == 201, made.text
        team_id = made.json()["id"]
        invited = api.post(
            f"/api/agent/teams/{team_id}/invitations", json={"email": bob_email, "role": "deployer"}
        )
        assert invited.status_code == 201, invited.text
        server = new_server(api, teamId=team_id)
        other = new_server(api, teamId=team_id)
    with berth.api(bob) as api:
        joined = api.post(f"/api/agent/invitations/{invited.json()['token']}/accept")
        assert joined.status_code == 200, joined.text
    return {
        "id": team_id,
        "alice": alice,
        "alice_email": alice_email,
        "bob": bob,
        "bob_email": bob_email,
        "bob_id": joined.json()["userId"],
        "invitation": invited.json(),
        "server": server["id"],
        "other": other["id"],
    }


def _deploy(berth: BerthProcess, token: str, server_id: str) -> Any:
    body = {
        "serverId": server_id,
        "name": f"app{uuid.uuid4().hex[:6]}",
        "image": "nginx:1",
        "port": 80,
    }
    with berth.api(token) as api:
        return api.post("/api/agent/docker/deploy", json=body)


def _audit(berth: BerthProcess, team: dict[str, Any]) -> list[dict[str, Any]]:
    with berth.api(team["alice"]) as api:
        page = api.get("/api/agent/audit", params={"teamId": team["id"], "limit": "200"})
    assert page.status_code == 200, page.text
    events: list[dict[str, Any]] = page.json()["events"]
    return events


class TestMembership:
    def test_invitation_answer_and_members(self, berth: BerthProcess, team: dict[str, Any]) -> None:
        """The invitation has its one-time token and dashboard url; both users are members."""
        invitation = team["invitation"]
        assert invitation["token"].startswith("berth_join_")
        assert invitation["url"].endswith("/invitations/" + invitation["token"])
        assert invitation["role"] == "deployer"
        with berth.api(team["bob"]) as api:
            members = api.get(f"/api/agent/teams/{team['id']}/members").json()["members"]
            teams = api.get("/api/agent/teams").json()["teams"]
        assert {(m["email"], m["role"]) for m in members} == {
            (team["alice_email"], "owner"),
            (team["bob_email"], "deployer"),
        }
        assert {"id": team["id"], "role": "deployer"}.items() <= next(
            t for t in teams if t["id"] == team["id"]
        ).items()

    def test_invitation_is_one_time(self, berth: BerthProcess, team: dict[str, Any]) -> None:
        """The same invitation token a second time is a 404."""
        with berth.api(team["bob"]) as api:
            problem(api.post(f"/api/agent/invitations/{team['invitation']['token']}/accept"), 404)

    def test_other_teams_ids_are_404(self, berth: BerthProcess, team: dict[str, Any]) -> None:
        """A stranger reads nothing of the team: its members, its servers, its audit."""
        ((_, stranger),) = berth.new_users(1, "stranger")
        with berth.api(stranger) as api:
            problem(api.get(f"/api/agent/teams/{team['id']}/members"), 404)
            problem(api.get(f"/api/agent/servers/{team['server']}"), 404)
            problem(api.get("/api/agent/audit", params={"teamId": team["id"]}), 404)
            body = {"email": "x@example.com", "role": "viewer"}
            problem(api.post(f"/api/agent/teams/{team['id']}/invitations", json=body), 404)


class TestTokens:
    def test_deployer_deploys_viewer_is_refused_and_audited(
        self, berth: BerthProcess, team: dict[str, Any]
    ) -> None:
        """A deployer's deploy token queues a deploy; a viewer-scoped one is a 403, audited."""
        deployer = _token(berth, team["bob"], name="ci", teamId=team["id"], scopes=["deploy"])
        assert _deploy(berth, deployer["token"], team["server"]).status_code == 202
        viewer = _token(berth, team["bob"], name="ro", teamId=team["id"], scopes=["read"])
        body = problem(_deploy(berth, viewer["token"], team["server"]), 403)
        assert body["type"] == "urn:berth:problem:insufficient-scope"
        assert "deploy" in body["detail"]
        denied = [e for e in _audit(berth, team) if e["outcome"] == "denied"]
        assert any(
            e["actor"]["tokenId"] == viewer["id"] and e["action"] == "deploy" for e in denied
        )
        ok = [e for e in _audit(berth, team) if e["actor"]["tokenId"] == deployer["id"]]
        assert [e["action"] for e in ok] == ["deploy"]

    def test_scopes_never_widen_the_role(self, berth: BerthProcess, team: dict[str, Any]) -> None:
        """Bob (deployer) with an admin-scoped token still may not add a server or invite."""
        wide = _token(berth, team["bob"], name="wide", teamId=team["id"], scopes=["admin"])
        with berth.api(wide["token"]) as api:
            assert api.get("/api/agent/tokens/current").json()["role"] == "deployer"
            body = problem(api.post("/api/agent/servers", json={"name": "x"}), 403)
            assert body["type"] == "urn:berth:problem:insufficient-scope"
            invite = {"email": "y@example.com", "role": "viewer"}
            problem(api.post(f"/api/agent/teams/{team['id']}/invitations", json=invite), 403)

    def test_server_limited_token_sees_only_its_servers(
        self, berth: BerthProcess, team: dict[str, Any]
    ) -> None:
        """A serverIds token lists its server alone; the team's other server is a 404."""
        limited = _token(
            berth,
            team["alice"],
            name="one",
            teamId=team["id"],
            scopes=["read"],
            serverIds=[team["server"]],
        )
        assert limited["serverIds"] == [team["server"]]
        with berth.api(limited["token"]) as api:
            ids = [s["id"] for s in api.get("/api/agent/servers").json()["servers"]]
            assert ids == [team["server"]]
            problem(api.get(f"/api/agent/servers/{team['other']}"), 404)
            current = api.get("/api/agent/tokens/current").json()
        assert current["serverIds"] == [team["server"]]
        assert current["teamId"] == team["id"]

    def test_removed_members_token_stops_at_once(self, berth: BerthProcess) -> None:
        """Once removed from the team, the member's token for it is refused on the next call."""
        (_, owner), (email, member) = berth.new_users(2, "removal")
        with berth.api(owner) as api:
            team_id = api.post("/api/agent/teams", json={"name": "t"}).json()["id"]
            token = api.post(
                f"/api/agent/teams/{team_id}/invitations", json={"email": email, "role": "viewer"}
            ).json()["token"]
        with berth.api(member) as api:
            user_id = api.post(f"/api/agent/invitations/{token}/accept").json()["userId"]
        named = _token(berth, member, name="r", teamId=team_id, scopes=["read"])["token"]
        with berth.api(named) as api:
            assert api.get("/api/agent/servers").status_code == 200
        with berth.api(owner) as api:
            assert api.delete(f"/api/agent/teams/{team_id}/members/{user_id}").status_code == 204
        with berth.api(named) as api:
            problem(api.get("/api/agent/servers"), 401)

    def test_revoked_token_stops_and_listing_has_no_secret(self, berth: BerthProcess) -> None:
        """A revoked token is a 401 at once; the listing never carries a secret."""
        ((_, main),) = berth.new_users(1, "revoke")
        made = _token(berth, main, name="gone", scopes=["read"])
        with berth.api(main) as api:
            listed = api.get("/api/agent/tokens").json()["tokens"]
            assert [t["id"] for t in listed] == [made["id"]]
            assert "token" not in listed[0]
            assert api.delete(f"/api/agent/tokens/{made['id']}").status_code == 204
        with berth.api(made["token"]) as api:
            problem(api.get("/api/agent/servers"), 401)

    def test_expired_token_is_401(self, berth: BerthProcess) -> None:
        """A token whose expiresAt passed is refused like an unknown one."""
        ((_, main),) = berth.new_users(1, "expiry")
        soon = (datetime.now(UTC) + timedelta(seconds=2)).isoformat()
        made = _token(berth, main, name="brief", scopes=["read"], expiresAt=soon)
        deadline = datetime.fromisoformat(made["expiresAt"])
        status = 200
        for _ in range(100):  # bounded: ends once it expired (about 2 s)
            with berth.api(made["token"]) as api:
                status = api.get("/api/agent/servers").status_code
            if status == 401 or datetime.now(UTC) > deadline + timedelta(seconds=5):
                break
        assert status == 401

    def test_a_narrow_token_mints_nothing(self, berth: BerthProcess) -> None:
        """A read-scoped token cannot make a wider one (403), nor a team."""
        ((_, main),) = berth.new_users(1, "narrow")
        narrow = _token(berth, main, name="n", scopes=["read"])
        with berth.api(narrow["token"]) as api:
            problem(api.post("/api/agent/tokens", json={"name": "w", "scopes": ["admin"]}), 403)
            problem(api.post("/api/agent/teams", json={"name": "w"}), 403)


class TestAudit:
    def test_each_change_is_in_the_log(self, berth: BerthProcess, team: dict[str, Any]) -> None:
        """The team's creation, the invitation, the join and the servers added are logged."""
        actions = {e["action"] for e in _audit(berth, team) if e["outcome"] == "ok"}
        assert {"team.create", "member.invite", "member.join", "server.create"} <= actions

    def test_the_log_is_for_admins(self, berth: BerthProcess, team: dict[str, Any]) -> None:
        """A deployer reading the audit log is a 403."""
        with berth.api(team["bob"]) as api:
            problem(api.get("/api/agent/audit", params={"teamId": team["id"]}), 403)

    def test_role_change_is_logged(self, berth: BerthProcess, team: dict[str, Any]) -> None:
        """PATCH a member's role answers the member, and the change is logged."""
        with berth.api(team["alice"]) as api:
            changed = api.patch(
                f"/api/agent/teams/{team['id']}/members/{team['bob_id']}", json={"role": "viewer"}
            )
            assert changed.status_code == 200, changed.text
            assert changed.json()["role"] == "viewer"
            back = {"role": "deployer"}
            assert (
                api.patch(
                    f"/api/agent/teams/{team['id']}/members/{team['bob_id']}", json=back
                ).status_code
                == 200
            )
        assert "member.role" in {e["action"] for e in _audit(berth, team)}


class TestHostileInput:
    def test_token_body_names_every_wrong_field(self, berth: BerthProcess) -> None:
        """Unknown scope, blank name with control characters, bad ids, a past time: one 422."""
        ((_, main),) = berth.new_users(1, "hostile")
        body = {
            "name": "\x00\x07",
            "scopes": ["root"],
            "serverIds": ["not-a-uuid"],
            "expiresAt": "yesterday",
            "extra": 1,
        }
        with berth.api(main) as api:
            found = problem(api.post("/api/agent/tokens", json=body), 422)
            assert api.get("/api/agent/tokens").json()["tokens"] == []
        fields = {e["field"] if "field" in e else e["location"] for e in found["errors"]}
        assert {
            "body.name",
            "body.scopes",
            "body.serverIds",
            "body.expiresAt",
            "body.extra",
        } <= fields

    def test_bad_role_huge_name_other_teams_server(
        self, berth: BerthProcess, team: dict[str, Any]
    ) -> None:
        """A bad role, a 10,000-character team name, a token for another team's server."""
        with berth.api(team["alice"]) as api:
            bad = {"email": "not-an-email", "role": "god"}
            found = problem(api.post(f"/api/agent/teams/{team['id']}/invitations", json=bad), 422)
            assert {e["location"] for e in found["errors"]} == {"body.email", "body.role"}
            found = problem(api.post("/api/agent/teams", json={"name": "x" * 10_000}), 422)
            assert [e["location"] for e in found["errors"]] == ["body.name"]
            patch = {"role": "emperor"}
            url = f"/api/agent/teams/{team['id']}/members/{team['bob_id']}"
            problem(api.patch(url, json=patch), 422)
        ((_, stranger),) = berth.new_users(1, "thief")
        body = {"name": "steal", "scopes": ["read"], "serverIds": [team["server"]]}
        with berth.api(stranger) as api:
            problem(api.post("/api/agent/tokens", json=body), 404)  # not a server of theirs
            problem(api.post("/api/agent/tokens", json={**body, "teamId": team["id"]}), 404)
            problem(api.post("/api/agent/servers", json={"name": "s", "teamId": team["id"]}), 404)
