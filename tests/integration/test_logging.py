"""No secret is ever written: not to serve's log, not to the CLI's stderr, not in clear to disk.

One ``berth serve`` (JSON logs, debug level) is driven through everything that
handles a secret — a password, API tokens, an enrollment token, env values, a
bogus token in a failed authentication — each one distinctive, and then its
log, the CLI's stderr and the SQLite files are searched for them.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from harness import BerthProcess, cli, new_server, unique_email

HEX32 = frozenset("0123456789abcdef")


@dataclass
class Session:
    """What was sent, and what came back, while driving the process."""

    process: BerthProcess
    secrets: dict[str, str] = field(default_factory=dict)  # what → secret text
    cli_stderr: list[str] = field(default_factory=list)
    responses: list[httpx.Response] = field(default_factory=list)


def _drive(process: BerthProcess) -> Session:
    session = Session(process)
    tag = uuid.uuid4().hex
    password = f"PASSW0RD-{tag}"
    session.secrets["password"] = password
    email = unique_email("logged")
    created = cli(process.data_dir, "user", "create", "--email", email, stdin=password + "\n")
    session.cli_stderr.append(created.stderr)
    refused = cli(
        process.data_dir,
        "user",
        "create",
        "--email",
        unique_email("logged-weak"),
        stdin=f"W{tag[:5]}\n",
        check=False,  # too short: refused, must not be echoed
    )
    assert refused.returncode != 0
    session.secrets["refused password"] = f"W{tag[:5]}"
    session.cli_stderr.append(refused.stderr)
    regenerated = cli(process.data_dir, "token", "regenerate", "--email", email)
    session.cli_stderr.append(regenerated.stderr)
    token = regenerated.stdout.strip()
    session.secrets["API token"] = token
    session.secrets["Authorization header"] = f"Bearer {token}"

    env = {
        "DB_PASSWORD": f"S3CR3T-{uuid.uuid4()}",
        "API_KEY": f"S3CR3T-{uuid.uuid4()} with spaces, 'quotes' and $(subshell)",
        "PLAIN": f"S3CR3T-{uuid.uuid4()}",
    }
    for key, value in env.items():
        session.secrets[f"env value {key}"] = value
    bad_env_value = f"S3CR3T-{uuid.uuid4()}\x00"  # invalid: a 422 that echoes it to the caller
    session.secrets["invalid env value"] = bad_env_value.rstrip("\x00")

    def keep(response: httpx.Response) -> httpx.Response:
        session.responses.append(response)
        return response

    with process.api(token) as api:
        server = new_server(api)
        session.secrets["enrollment token"] = server["enrollmentToken"]
        body = {"serverId": server["id"], "name": "shop", "image": "shop:1.0", "env": env}
        assert keep(api.post("/api/agent/docker/deploy", json=body)).status_code == 202
        assert (
            keep(
                api.post(
                    "/api/agent/docker/deploy",
                    json={**body, "name": "again", "port": 3001},
                    headers={"Idempotency-Key": f"idem-{tag}"},
                )
            ).status_code
            == 202
        )
        bad = {**body, "env": {**env, "BROKEN": bad_env_value}, "port": 0}
        assert keep(api.post("/api/agent/docker/deploy", json=bad)).status_code == 422
        assert keep(api.get("/api/agent/install", params={"serverId": server["id"]})).is_success
        assert keep(
            api.get("/api/agent/servers", headers={"X-Request-Id": f"client-{tag}"})
        ).is_success
        assert keep(
            api.get("/api/agent/servers", headers={"X-Request-Id": "not a valid id!"})
        ).is_success

    bogus = f"berth_BOGUS{tag}{tag}"[:55]
    session.secrets["bogus token"] = bogus
    with process.api(bogus) as api:
        assert keep(api.get("/api/agent/servers")).status_code == 401
    with process.api(f"bogus-{tag}") as api:
        session.secrets["bogus non-berth token"] = f"bogus-{tag}"
        assert keep(api.get("/api/agent/servers")).status_code == 401
    enroll = httpx.get(
        f"{process.url}/api/agent/servers",
        headers={"Authorization": f"Bearer {server['enrollmentToken']}"},
    )
    assert keep(enroll).status_code == 401
    return session


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Session:
    """A serve at debug level, driven through every secret, then stopped (logs flushed)."""
    process = BerthProcess(
        tmp_path_factory.mktemp("logged"), env={"BERTH_LOG_LEVEL": "debug"}
    ).start()
    try:
        driven = _drive(process)
        process.wait_for_request_logs(r.headers["x-request-id"] for r in driven.responses)
    finally:
        process.stop()
    return driven


SECRETS = [
    "password",
    "refused password",
    "API token",
    "Authorization header",
    "enrollment token",
    "env value DB_PASSWORD",
    "env value API_KEY",
    "env value PLAIN",
    "invalid env value",
    "bogus token",
    "bogus non-berth token",
]


class TestNoSecretWritten:
    """Secrets appear in no log, no CLI error output and no database file in clear."""

    @pytest.mark.parametrize("what", SECRETS)
    def test_secret_not_in_serve_log(self, session: Session, what: str) -> None:
        """serve's whole log output never contains the secret."""
        assert session.process.logs(), "the log is empty: nothing was checked"
        assert session.secrets[what] not in session.process.logs()

    @pytest.mark.parametrize("what", SECRETS)
    def test_secret_not_in_cli_stderr(self, session: Session, what: str) -> None:
        """The CLI's stderr never contains the secret."""
        for stderr in session.cli_stderr:
            assert session.secrets[what] not in stderr

    @pytest.mark.parametrize("what", SECRETS)
    def test_secret_not_in_database_files(self, session: Session, what: str) -> None:
        """berth.db and its WAL and shared-memory files hold no secret in clear."""
        files = sorted(session.process.data_dir.glob("berth.db*"))
        assert files
        needle = session.secrets[what].encode()
        for path in files:
            assert needle not in path.read_bytes(), path.name


class TestRequestIds:
    """Each request is logged once, with the request id the client saw."""

    def test_every_request_line_has_a_request_id(self, session: Session) -> None:
        """Every ``request`` log line carries a ``request_id``."""
        lines = [r for r in session.process.log_records() if r.get("event") == "request"]
        assert lines
        for line in lines:
            assert isinstance(line.get("request_id"), str)
            assert line["request_id"]

    def test_response_header_matches_logged_id(self, session: Session) -> None:
        """``X-Request-Id`` of each response names the log line of that very request."""
        logged = session.process.wait_for_request_logs(
            r.headers["x-request-id"] for r in session.responses
        )
        for response in session.responses:
            line: dict[str, Any] = logged[response.headers["x-request-id"]]
            assert line["path"] == response.request.url.path
            assert line["method"] == response.request.method
            assert line["status"] == response.status_code

    def test_problem_body_carries_the_same_id(self, session: Session) -> None:
        """A problem body's ``requestId`` equals its ``X-Request-Id`` header."""
        problems = [r for r in session.responses if r.status_code >= 400]
        assert problems
        for response in problems:
            assert response.json()["requestId"] == response.headers["x-request-id"]

    def test_client_request_id_is_kept_if_sane_else_replaced(self, session: Session) -> None:
        """A well-formed incoming X-Request-Id is echoed; a malformed one is replaced."""
        by_sent = {r.request.headers.get("x-request-id"): r for r in session.responses}
        sane = next(k for k in by_sent if k and k.startswith("client-"))
        assert by_sent[sane].headers["x-request-id"] == sane
        replaced = by_sent["not a valid id!"].headers["x-request-id"]
        assert len(replaced) == 32
        assert set(replaced) <= HEX32
