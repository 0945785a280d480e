"""Building from source in a real browser: Debian's chromium driven by Playwright against a
real ``berth serve --local`` (real SQLite, real dockerd), deploying from a Git repository
served over git's "dumb HTTP" from a directory on 127.0.0.1 (``git_support``).

The deploy form's Source (an image, or a Git repository built on the server) with its
errors beside their fields, with and without JavaScript; the app page's build log,
followed live while the build runs (the deployment's event stream) and cancelable; a built
revision's commit and image in the history; a Redeploy that builds the new commit.
Fixtures and helpers are ``test_dashboard``'s; this module's berth may fetch from
127.0.0.1 (``BERTH_ALLOW_PRIVATE_TARGETS``).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import test_dashboard as dashboard
from deploy_support import (
    ECHO_V1,
    RUN,
    environ_of,
    host_port,
    remove_built_images,
    wait_until,
)
from git_support import GitRepo, served_repo
from harness import BerthProcess
from test_builds import build_containers
from test_dashboard import ENV, Account, api_token, expect, open_context, watched

# The dashboard tests' fixtures, by name (``owner`` signs up on this module's ``stack``).
chromium = dashboard.chromium
owner = dashboard.owner
owner_page = dashboard.owner_page
local_server = dashboard.local_server

PREFIX = f"dbuild-{RUN}-"
BUILD_TIMEOUT = 120_000  # ms: a build, then the app's start and health check


@pytest.fixture(scope="module")
def stack(
    tmp_path_factory: pytest.TempPathFactory, docker_ready: None, echo_image: str
) -> Iterator[BerthProcess]:
    """A fresh ``berth serve --local`` that may fetch Git repositories from 127.0.0.1."""
    env = {**ENV, "BERTH_ALLOW_PRIVATE_TARGETS": "1"}
    try:
        yield from dashboard.serve_dashboard(tmp_path_factory.mktemp("dashbuild"), env)
    finally:
        remove_built_images(PREFIX)


@pytest.fixture
def repo(tmp_path: Path) -> Iterator[GitRepo]:
    with served_repo(tmp_path) as made:
        yield made


def dockerfile(built: str, *more: str) -> str:
    """A Dockerfile from the echo image that sets ``BUILT`` (and ``more`` lines)."""
    return "\n".join([f"FROM {ECHO_V1}", f"ENV BUILT={built}", *more, ""])


def choose_git(page: Any) -> None:
    """Pick the Source "Build from a Git repository": its fields show, the Image's go."""
    page.get_by_label("Build from a Git repository").check()
    expect(page.get_by_label("Repository URL")).to_be_visible()
    expect(page.locator("#image")).to_be_hidden()


def deploy_git_in_browser(page: Any, server_id: str, name: str, port: int, url: str) -> str:
    """Fill the deploy form with a Git source (branch ``main``) and send it; the new
    deployment's id (the server page follows it)."""
    page.goto(f"/servers/{server_id}/deploy")
    page.get_by_label("Name", exact=True).fill(name)
    choose_git(page)
    page.get_by_label("Repository URL").fill(url)
    page.get_by_label("Branch, tag or commit").fill("main")
    page.get_by_label("Port", exact=True).fill(str(port))
    page.locator('input[name="env_key"]').first.fill("PORT")
    page.locator('textarea[name="env_value"]').first.fill(str(port))
    page.locator("#deploy-form").get_by_role("button", name="Deploy").click()
    expect(page).to_have_url(re.compile(rf"/servers/{server_id}\?deployment="))
    found = re.search(r"deployment=([0-9a-f-]{36})", page.url)
    assert found, page.url
    return found[1]


def final_badge(page: Any, deployment_id: str, state: str) -> None:
    """Wait (bounded) for the deployment's (or revision's) badge to show a final state; it
    must be ``state``."""
    entry = page.locator(f"#deployment-{deployment_id}, #revision-{deployment_id}")
    badge = entry.locator("summary .badge")
    final = re.compile(r"succeeded|failed|timed out|canceled")
    expect(badge).to_have_text(final, timeout=BUILD_TIMEOUT)
    assert badge.inner_text() == state, entry.inner_text()


def installation_of(stack: BerthProcess, owner: Account, deployment_id: str) -> str:
    with stack.api(api_token(stack, owner.email)) as api:
        found = api.get(f"/api/agent/deployments/{deployment_id}")
    assert found.status_code == 200, found.text
    return str(found.json()["installationId"])


class TestDeployFromGit:
    def test_a_git_deploy_builds_and_the_history_shows_commit_and_image(
        self, owner_page: Any, stack: BerthProcess, owner: Account, local_server: str, repo: GitRepo
    ) -> None:
        """The form's Git source deploys the branch's commit, built on the server; the app's
        page shows the revision's commit and built image, its source and its build log;
        Redeploy offers the same Git source and builds the new commit, which the history
        names as what changed."""
        page = owner_page
        name, port = f"{PREFIX}git", host_port()
        first_commit = repo.commit({"Dockerfile": dockerfile("form-one")}, "first")
        first = deploy_git_in_browser(page, local_server, name, port, repo.url)
        final_badge(page, first, "succeeded")
        assert environ_of(port)["BUILT"] == "form-one"

        installation = installation_of(stack, owner, first)
        base = f"/servers/{local_server}/installations/{installation}"
        page.goto(base)
        revision = page.locator(f"#revision-{first}")
        tag = f"berth/{name}:{uuid.UUID(first).hex[:12]}"
        expect(revision.locator("[data-revision-image]")).to_have_text(tag)
        expect(revision.locator("[data-revision-commit]")).to_have_text(first_commit[:12])
        expect(revision.locator("[data-revision-source]")).to_contain_text(f"{repo.url} at main")
        expect(revision.locator("[data-revision-source] [data-commit]")).to_have_text(first_commit)
        expect(page.locator("[data-current-commit]")).to_have_text(first_commit[:12])
        build_log = revision.locator(f"#build-log-{first}")
        build_log.locator("summary").click()
        lines = revision.locator("[data-build-log]")
        expect(lines).to_contain_text(f"Building commit {first_commit}.")
        expect(lines).to_contain_text(f"Built {tag} (sha256:")
        # The builder's output is in the log, not in the steps, which name the build once.
        expect(revision.locator(".events .step", has_text="build")).to_have_count(1)

        second_commit = repo.commit({"Dockerfile": dockerfile("form-two")}, "second")
        page.locator("#redeploy").click()
        expect(page.get_by_label("Build from a Git repository")).to_be_checked()
        expect(page.get_by_label("Repository URL")).to_have_value(repo.url)
        expect(page.get_by_label("Branch, tag or commit")).to_have_value("main")
        expect(page.locator("#image")).to_be_hidden()
        page.locator("#deploy-form").get_by_role("button", name="Deploy").click()
        expect(page).to_have_url(re.compile(rf"{base}\?deployment=[0-9a-f-]{{36}}#revision-"))
        second = page.url.split("deployment=", 1)[1].split("#", 1)[0]
        final_badge(page, second, "succeeded")
        newest = page.locator(f"#revision-{second}")
        expect(newest.locator("[data-revision-commit]")).to_have_text(second_commit[:12])
        expect(newest.locator(".changes li", has_text="Commit:")).to_have_text(
            f"Commit: {first_commit[:12]} → {second_commit[:12]}"
        )
        assert environ_of(port)["BUILT"] == "form-two"
        dashboard.shoot(page, "app-build")

    def test_the_build_log_is_followed_live_and_the_build_can_be_canceled(
        self, owner_page: Any, stack: BerthProcess, owner: Account, local_server: str, repo: GitRepo
    ) -> None:
        """While the build runs, its output appears in the app page's build log as the
        builder writes it (the deployment's event stream, no reload); Cancel stops the
        build: the revision ends canceled and the build's container goes."""
        page = owner_page
        name, port = f"{PREFIX}live", host_port()
        marker = f"endless-{uuid.uuid4().hex[:8]}"
        # A RUN step that prints a line and never ends: the echo server, told not to listen.
        endless = dockerfile(marker, "ENV BERTH_TEST_MODE=nolisten", 'RUN ["/server"]')
        repo.commit({"Dockerfile": endless}, "endless")
        deployment = deploy_git_in_browser(page, local_server, name, port, repo.url)
        installation = installation_of(stack, owner, deployment)
        page.goto(f"/servers/{local_server}/installations/{installation}")
        page.evaluate("window.__berthNoReload = true")
        revision = page.locator(f"#revision-{deployment}")
        lines = revision.locator("[data-build-log]")
        expect(lines).to_contain_text("not listening, as asked", timeout=BUILD_TIMEOUT)
        expect(revision.locator("[data-building]")).to_be_visible()
        expect(revision.locator("summary .badge")).to_have_text("running")
        assert page.evaluate("window.__berthNoReload") is True, "the page reloaded"

        page.get_by_role("button", name="Cancel the running deployment").click()
        final_badge(page, deployment, "canceled")
        expect(page.locator(f"#revision-{deployment} [data-build-log]")).to_contain_text(
            "not listening, as asked"
        )
        gone = "the build's RUN container gone"
        wait_until(lambda: build_containers(marker), lambda left: not left, 30, gone)


class TestGitFormErrors:
    def test_git_errors_are_shown_beside_their_fields(
        self, owner_page: Any, local_server: str
    ) -> None:
        """Broken Git fields are refused in place, each error beside its field (marked
        invalid, the first focused), what was typed kept, the Git source still chosen."""
        page = owner_page
        page.goto(f"/servers/{local_server}/deploy")
        page.get_by_label("Name", exact=True).fill(f"{PREFIX}bad")
        choose_git(page)
        page.get_by_label("Repository URL").fill("ftp://git.example.com/shop.git")
        page.get_by_label("Branch, tag or commit").fill("-x")
        page.get_by_label("Context directory").fill("../up")
        page.get_by_label("Build arguments").fill("FLAVOUR=mint\nno equals sign")
        page.locator("#deploy-form").get_by_role("button", name="Deploy").click()
        for field in ("git_url", "git_ref", "build_context", "build_args"):
            expect(page.locator(f"#{field}-error")).to_be_visible()
            expect(page.locator(f"#{field}")).to_have_attribute("aria-invalid", "true")
        expect(page.locator("#build_args-error")).to_contain_text("Line 2")
        expect(page.locator("#git_url")).to_be_focused()
        expect(page.locator("#image-error")).to_be_hidden()
        expect(page.locator("#build_dockerfile")).not_to_have_attribute("aria-invalid", "true")
        expect(page.get_by_label("Repository URL")).to_have_value("ftp://git.example.com/shop.git")
        expect(page.get_by_label("Build from a Git repository")).to_be_checked()
        expect(page.locator("[data-error-for=summary]")).to_be_visible()
        dashboard.shoot(page, "deploy-git-errors")

    def test_without_javascript_the_source_radio_picks_the_fields(
        self, chromium: Any, stack: BerthProcess, owner: Account, local_server: str
    ) -> None:
        """Without JavaScript both sources' fields show; the form answers with the errors of
        the source picked, beside their fields, that source still picked; a password typed
        into the URL is refused and not shown again."""
        context = open_context(chromium, stack, owner, javascript=False)
        page, problems = watched(context)
        try:
            page.goto(f"/servers/{local_server}/deploy")
            expect(page.locator("#image")).to_be_visible()
            expect(page.get_by_label("Repository URL")).to_be_visible()
            page.get_by_label("Name", exact=True).fill(f"{PREFIX}nojs")
            page.locator("#image").fill("nginx")  # no tag: refused, were the image picked
            page.get_by_label("Build from a Git repository").check()
            page.get_by_label("Repository URL").fill("https://user:pw@git.example.com/s.git")
            page.locator("#deploy-form").get_by_role("button", name="Deploy").click()
            expect(page.locator("#git_url-error")).to_contain_text("user or password")
            expect(page.locator("#image-error")).to_be_hidden()
            expect(page.get_by_label("Build from a Git repository")).to_be_checked()
            # The password typed into the URL is not sent back into the page.
            expect(page.locator("#git_url")).to_have_value("https://git.example.com/s.git")
            assert "user:pw" not in page.content()
        finally:
            context.close()
        assert not problems, problems
