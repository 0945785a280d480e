"""Push to deploy and private Git repositories: ``berth serve --local`` builds from a Git
repository served over git's "dumb HTTP" on 127.0.0.1; a deploy hook's URL, POSTed a
push event signed as GitHub or Gitea/Forgejo sign theirs, deploys the pushed commit;
git credentials saved for a host open a repository behind HTTP basic auth.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from deploy_support import (
    Stack,
    environ_of,
    host_port,
    open_stack,
    wait_final,
    wait_until,
)
from git_support import GitRepo, QuietHandler, served_repo
from harness import Api, problem
from infra import Sshd
from test_builds import (
    build_containers,
    deploy_build,
    dockerfile,
    final,
)

pytestmark = pytest.mark.integration

ZERO = "0" * 40


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, echo_image: str, sshd: Sshd) -> Iterator[Stack]:
    """``berth serve --local``: alice owns the local server and an SSH server, bob one."""
    private = {"BERTH_ALLOW_PRIVATE_TARGETS": "1"}  # the Git repositories are on 127.0.0.1
    with open_stack(tmp_path_factory.mktemp("push"), sshd, "push", private) as opened:
        yield opened


def git_app(stack: Stack, repo: GitRepo, what: str) -> tuple[dict[str, Any], int]:
    """alice's app built from ``repo``'s ``main`` (first commit ``BUILT=one``) on the local
    server: its succeeded deployment and its port."""
    api, server_id = stack.alice.api, stack.alice.servers["local"]
    port = host_port()
    repo.commit({"Dockerfile": dockerfile(f"{what}-one")}, "first")
    build = {"git": {"url": repo.url, "ref": "main"}}
    response = deploy_build(api, server_id, stack.name(what), port, build)
    return final(api, response, "succeeded"), port


def new_hook(api: Api, installation_id: str) -> dict[str, Any]:
    response = api.post(f"/api/agent/installations/{installation_id}/deploy-hook")
    assert response.status_code == 201, response.text
    answer: dict[str, Any] = response.json()
    return answer


def push_body(ref: str, after: str, before: str = ZERO) -> bytes:
    """A push event's body as GitHub and Gitea send it (the fields berth reads)."""
    event = {
        "ref": ref,
        "before": before,
        "after": after,
        "repository": {"full_name": "acme/app", "default_branch": "main"},
        "commits": [{"id": after, "message": "a change"}],
    }
    return json.dumps(event).encode()


def push(
    hook: dict[str, Any],
    after: str,
    *,
    ref: str = "refs/heads/main",
    sender: str = "github",
    secret: str | None = None,
) -> httpx.Response:
    """POST a push event to ``hook``'s URL, signed with its secret (or ``secret``) as
    ``sender`` signs (``github``, ``gitea``, or ``none``: unsigned)."""
    body = push_body(ref, after)
    digest = hmac.new((secret or hook["secret"]).encode(), body, hashlib.sha256).hexdigest()
    headers = {"Content-Type": "application/json"}
    if sender == "github":
        headers |= {"X-GitHub-Event": "push", "X-Hub-Signature-256": f"sha256={digest}"}
    elif sender == "gitea":
        headers |= {"X-Gitea-Event": "push", "X-Gitea-Signature": digest}
    else:
        headers |= {"X-GitHub-Event": "push"}
    return httpx.post(hook["url"], content=body, headers=headers, timeout=30)


def revisions(api: Api, installation_id: str) -> list[dict[str, Any]]:
    response = api.get(f"/api/agent/installations/{installation_id}/deployments")
    assert response.status_code == 200, response.text
    found: list[dict[str, Any]] = response.json()["deployments"]
    return found


def pushed(api: Api, response: httpx.Response) -> dict[str, Any]:
    """The deployment a push queued, once final."""
    assert response.status_code == 202, response.text
    answer = response.json()
    assert answer["status"] == "queued", answer
    return wait_final(api, answer["deploymentId"], 120)


def test_a_signed_github_push_deploys_the_pushed_commit(stack: Stack, repo: GitRepo) -> None:
    """A push to the app's branch, signed with X-Hub-Signature-256, builds and deploys the
    pushed commit (recorded on the deployment), without any API token."""
    first, port = git_app(stack, repo, "hub")
    hook = new_hook(stack.alice.api, first["installationId"])
    assert hook["url"].endswith(f"/api/hooks/deploy/{hook['id']}")
    second = repo.commit({"Dockerfile": dockerfile("hub-two")}, "second")
    deployment = pushed(stack.alice.api, push(hook, second))
    assert deployment["state"] == "succeeded", deployment
    assert deployment["commit"] == second
    assert deployment["build"]["git"] == {"url": repo.url, "ref": "main"}
    assert environ_of(port)["BUILT"] == "hub-two"


def test_a_gitea_signed_push_deploys_the_pushed_commit(stack: Stack, repo: GitRepo) -> None:
    """A push signed with X-Gitea-Signature (Gitea, Forgejo) deploys the pushed commit."""
    first, port = git_app(stack, repo, "tea")
    hook = new_hook(stack.alice.api, first["installationId"])
    second = repo.commit({"Dockerfile": dockerfile("tea-two")}, "second")
    deployment = pushed(stack.alice.api, push(hook, second, sender="gitea"))
    assert deployment["state"] == "succeeded", deployment
    assert deployment["commit"] == second
    assert environ_of(port)["BUILT"] == "tea-two"


def test_a_badly_signed_or_unsigned_push_is_refused_and_nothing_deploys(
    stack: Stack, repo: GitRepo
) -> None:
    """A push signed with another secret, or not signed, is a 401 problem; no deployment."""
    first, port = git_app(stack, repo, "badsig")
    api, installation_id = stack.alice.api, first["installationId"]
    hook = new_hook(api, installation_id)
    second = repo.commit({"Dockerfile": dockerfile("badsig-two")}, "second")
    problem(push(hook, second, secret="not-the-secret"), 401)
    problem(push(hook, second, sender="gitea", secret="not-the-secret"), 401)
    problem(push(hook, second, sender="none"), 401)
    assert [d["id"] for d in revisions(api, installation_id)] == [first["id"]]
    assert environ_of(port)["BUILT"] == "badsig-one"


def test_a_push_to_another_branch_is_ignored(stack: Stack, repo: GitRepo) -> None:
    """A push to a branch other than the app's is a 202 that says it was ignored; nothing
    deploys."""
    first, _ = git_app(stack, repo, "branch")
    api, installation_id = stack.alice.api, first["installationId"]
    hook = new_hook(api, installation_id)
    response = push(hook, "a" * 40, ref="refs/heads/feature")
    assert response.status_code == 202, response.text
    assert response.json()["status"] == "ignored"
    assert [d["id"] for d in revisions(api, installation_id)] == [first["id"]]


def test_a_burst_of_pushes_deploys_the_newest_commit_once(stack: Stack, repo: GitRepo) -> None:
    """Pushes that arrive while a deployment runs queue behind it; each newer one supersedes
    the one queued before it, so the newest commit is deployed once and the middle one never."""
    first, port = git_app(stack, repo, "burst")
    api = stack.alice.api
    hook = new_hook(api, first["installationId"])
    marker = f"hold-{uuid.uuid4().hex[:8]}"
    hold = repo.commit({"Dockerfile": dockerfile(marker, 'RUN ["/server"]')}, "a build that hangs")
    held = push(hook, hold)
    assert held.status_code == 202, held.text
    wait_until(lambda: build_containers(marker), bool, 60, "the held build running")
    middle = repo.commit({"Dockerfile": dockerfile("burst-middle")}, "middle")
    newest = repo.commit({"Dockerfile": dockerfile("burst-newest")}, "newest")
    queued = [push(hook, middle), push(hook, newest)]
    assert [r.status_code for r in queued] == [202, 202], [r.text for r in queued]
    middle_id, newest_id = (r.json()["deploymentId"] for r in queued)
    api.post(f"/api/agent/deployments/{held.json()['deploymentId']}/cancel")
    newest_run = wait_final(api, newest_id, 120)
    assert newest_run["state"] == "succeeded", newest_run
    assert newest_run["commit"] == newest
    superseded = wait_final(api, middle_id, 10)
    assert superseded["state"] == "canceled"
    assert newest_id in (superseded["error"] or "")
    built = [d for d in revisions(api, first["installationId"]) if d["state"] == "succeeded"]
    assert [d["commit"] for d in built] == [newest, first["commit"]]
    assert environ_of(port)["BUILT"] == "burst-newest"


def test_a_hook_is_rotated_by_a_new_post_and_removed_by_delete(stack: Stack, repo: GitRepo) -> None:
    """A second POST gives a new secret (the old one no longer signs) and keeps the URL;
    GET tells the URL without the secret; after DELETE the URL is a 404."""
    first, _ = git_app(stack, repo, "rotate")
    api, installation_id = stack.alice.api, first["installationId"]
    old = new_hook(api, installation_id)
    new = new_hook(api, installation_id)
    assert new["url"] == old["url"]
    assert new["secret"] != old["secret"]
    shown = api.get(f"/api/agent/installations/{installation_id}/deploy-hook")
    assert shown.status_code == 200, shown.text
    assert shown.json()["url"] == new["url"]
    assert "secret" not in shown.json()
    problem(push(old, "b" * 40), 401)
    assert push(new, "b" * 40, ref="refs/heads/other").status_code == 202
    removed = api.delete(f"/api/agent/installations/{installation_id}/deploy-hook")
    assert removed.status_code == 204, removed.text
    problem(push(new, "b" * 40), 404)
    problem(api.get(f"/api/agent/installations/{installation_id}/deploy-hook"), 404)


def test_another_teams_installation_has_no_hook_for_them(stack: Stack, repo: GitRepo) -> None:
    """Bob can neither make, read nor remove a hook of alice's installation: 404s."""
    first, _ = git_app(stack, repo, "notbobs")
    path = f"/api/agent/installations/{first['installationId']}/deploy-hook"
    problem(stack.bob.api.post(path), 404)
    problem(stack.bob.api.get(path), 404)
    problem(stack.bob.api.delete(path), 404)


def test_an_app_not_built_from_git_gets_no_hook(stack: Stack) -> None:
    """A hook for an app deployed from an image is a 409 ``not-built-from-git``."""
    from deploy_support import ECHO_V1

    api, server_id = stack.alice.api, stack.alice.servers["local"]
    port = host_port()
    body = {"serverId": server_id, "name": stack.name("image"), "image": ECHO_V1, "port": port}
    body["env"] = {"PORT": str(port)}
    response = api.post("/api/agent/docker/deploy", params={"wait": 120}, json=body, timeout=150)
    installation_id = final(api, response, "succeeded")["installationId"]
    refused = problem(api.post(f"/api/agent/installations/{installation_id}/deploy-hook"), 409)
    assert refused["type"].endswith("not-built-from-git"), refused


def test_an_oversized_push_is_refused(stack: Stack, repo: GitRepo) -> None:
    """A push body over the hook's cap is a 413, before its signature is even looked at."""
    first, _ = git_app(stack, repo, "huge")
    hook = new_hook(stack.alice.api, first["installationId"])
    body = b"{" + b" " * (6 * 1024 * 1024) + b"}"
    response = httpx.post(hook["url"], content=body, headers={"X-GitHub-Event": "push"})
    problem(response, 413)


# -- private repositories -----------------------------------------------------------------


class _BasicAuthHandler(QuietHandler):
    """Dumb HTTP behind basic auth: ``expected`` is the Authorization header it lets in."""

    expected = ""

    def do_GET(self) -> None:
        given = self.headers.get("Authorization") or ""
        if not hmac.compare_digest(given, self.expected):
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="git"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        super().do_GET()


@pytest.fixture
def repo(tmp_path: Path) -> Iterator[GitRepo]:
    """A public repository served over dumb HTTP."""
    with served_repo(tmp_path) as made:
        yield made


@pytest.fixture
def private_repo(tmp_path: Path) -> Iterator[tuple[GitRepo, str, str]]:
    """A repository served behind basic auth as ``deployer``; ``(repo, host, password)``."""
    password = f"pw-{uuid.uuid4().hex}"
    expected = "Basic " + base64.b64encode(f"deployer:{password}".encode()).decode()
    handler = type("Handler", (_BasicAuthHandler,), {"expected": expected})
    with served_repo(tmp_path, handler) as made:
        yield made, made.url.split("/")[2], password


def test_git_credentials_open_a_private_repository(
    stack: Stack, private_repo: tuple[GitRepo, str, str]
) -> None:
    """Without credentials for its host a private repository fails at build; with the
    team's credentials saved (never returned), the same deploy succeeds."""
    repo_, host, password = private_repo
    api, server_id = stack.alice.api, stack.alice.servers["local"]
    port = host_port()
    name = stack.name("private")
    commit = repo_.commit({"Dockerfile": dockerfile("private-one")}, "first")
    build = {"git": {"url": repo_.url, "ref": "main"}}
    failed = final(api, deploy_build(api, server_id, name, port, build), "failed")
    assert failed["step"] == "build"
    saved = api.post(
        "/api/agent/git-credentials",
        json={"host": host, "username": "deployer", "password": password},
    )
    assert saved.status_code == 201, saved.text
    assert password not in saved.text
    assert saved.json()["host"] == host
    listed = api.get("/api/agent/git-credentials")
    assert listed.status_code == 200, listed.text
    assert password not in listed.text
    assert [c["host"] for c in listed.json()["gitCredentials"]] == [host]
    deployed = final(api, deploy_build(api, server_id, name, port, build), "succeeded")
    assert deployed["commit"] == commit
    assert password not in json.dumps(deployed)
    assert environ_of(port)["BUILT"] == "private-one"


def test_another_teams_git_credentials_are_not_found(stack: Stack) -> None:
    """Bob neither sees nor removes alice's git credentials (404); a second entry for one
    host is a 409; bad fields are a 422 naming each."""
    api = stack.alice.api
    host = f"git-{uuid.uuid4().hex[:8]}.example.com"
    saved = api.post(
        "/api/agent/git-credentials", json={"host": host, "username": "u", "password": "p" * 12}
    )
    assert saved.status_code == 201, saved.text
    credential_id = saved.json()["id"]
    again = api.post(
        "/api/agent/git-credentials", json={"host": host, "username": "u", "password": "q" * 12}
    )
    problem(again, 409)
    bobs = stack.bob.api.get("/api/agent/git-credentials").json()["gitCredentials"]
    assert credential_id not in [c["id"] for c in bobs]
    problem(stack.bob.api.delete(f"/api/agent/git-credentials/{credential_id}"), 404)
    bad = api.post(
        "/api/agent/git-credentials", json={"host": "https://x/y", "username": "", "password": ""}
    )
    locations = {e["location"] for e in problem(bad, 422)["errors"]}
    assert locations == {"body.host", "body.username", "body.password"}
    removed = api.delete(f"/api/agent/git-credentials/{credential_id}")
    assert removed.status_code == 204, removed.text


# -- the dashboard --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from test_dashboard import launch_chromium

    with launch_chromium() as launched:
        yield launched


def signed_in(browser: Any, stack: Stack, email: str) -> tuple[Any, list[str]]:
    """A page signed in as ``email`` (through the sign-in form) and its console problems."""
    from harness import PASSWORD
    from test_dashboard import DESKTOP, watched

    context = browser.new_context(base_url=stack.berth.url, viewport=DESKTOP)
    context.set_default_timeout(15_000)
    page, problems = watched(context)
    page.goto("/login")
    page.get_by_label("Email").fill(email)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url("**/servers")
    return page, problems


def test_the_app_page_sets_up_push_to_deploy(stack: Stack, repo: GitRepo, browser: Any) -> None:
    """An app built from Git offers Push to deploy: the page shows the hook's URL and its
    secret once (the secret signs), and Remove hook (confirmed) removes it."""
    from test_dashboard import expect

    first, _ = git_app(stack, repo, "page")
    api, installation_id = stack.alice.api, first["installationId"]
    page, problems = signed_in(browser, stack, stack.alice.email)
    page.goto(f"/servers/{first['serverId']}/installations/{installation_id}")
    section = page.locator("#push")
    section.get_by_role("button", name="Set up push to deploy").click()
    secret = str(page.locator("#hook-secret").input_value())
    url = str(page.locator("#hook-url").input_value())
    shown = api.get(f"/api/agent/installations/{installation_id}/deploy-hook").json()
    assert url == shown["url"]
    assert secret.startswith("berth_hook_")
    hook = {"url": url, "secret": secret}
    ignored = push(hook, "c" * 40, ref="refs/heads/elsewhere")  # signed right: 202, not 401
    assert ignored.status_code == 202, ignored.text
    page.reload()
    expect(page.locator("#hook-secret")).to_have_count(0)  # shown once
    section.get_by_role("button", name="Remove hook…").click()
    page.get_by_role("dialog").get_by_role("button", name="Remove hook").click()
    expect(page.locator(".notice")).to_contain_text("deploy hook was removed")
    gone = api.get(f"/api/agent/installations/{installation_id}/deploy-hook")
    assert gone.status_code == 404
    page.context.close()
    assert not problems, problems


def test_settings_saves_and_removes_git_credentials(stack: Stack, browser: Any) -> None:
    """Settings → Git repositories: a bad host is refused at its field, a good entry is
    listed without its password and reaches the API; Remove (confirmed) forgets it."""
    from test_dashboard import expect

    page, problems = signed_in(browser, stack, stack.bob.email)
    secret = f"git-pw-{uuid.uuid4().hex}"
    host = f"git-{uuid.uuid4().hex[:6]}.example.com"
    page.goto("/settings")
    form = page.locator("#add-git-credential")
    form.get_by_label("Host").fill(f"https://{host}/acme")
    form.get_by_label("User name").fill("deployer")
    form.get_by_label("Password or access token").fill(secret)
    form.get_by_role("button", name="Add Git credentials").click()
    expect(page.locator('[data-error-for="git_host"]')).to_contain_text("without a scheme")
    assert secret not in page.content()
    form.get_by_label("Host").fill(host)
    form.get_by_label("Password or access token").fill(secret)
    form.get_by_role("button", name="Add Git credentials").click()
    row = page.locator(f'tr[data-git-host="{host}"]')
    expect(row).to_contain_text("deployer")
    assert secret not in page.content()
    listed = stack.bob.api.get("/api/agent/git-credentials").json()["gitCredentials"]
    assert [c["host"] for c in listed] == [host]
    row.get_by_role("button", name=f"Remove {host}").click()
    page.get_by_role("dialog").get_by_role("button", name="Remove credentials").click()
    expect(page.locator(".notice")).to_contain_text("Git credentials were removed")
    assert stack.bob.api.get("/api/agent/git-credentials").json() == {"gitCredentials": []}
    page.context.close()
    assert not problems, problems
