"""Building from source: ``berth serve`` has the target server's Docker Engine build the
image (its build API, over SSH and locally, pulls off: the Dockerfiles start ``FROM`` the
echo image present here), from an uploaded context (``POST /api/agent/sources``) or a
Git repository served over git's "dumb HTTP" from a directory on 127.0.0.1.

Each build's Dockerfile sets ``BUILT``, which the echo server shows (``GET /env``): what
answers tells which build serves.
"""

from __future__ import annotations

import io
import shutil
import tarfile
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from berth.adapters.outbound import SystemResolver
from berth.adapters.sources import DiskSourceStore, LocalBuildSources
from berth.adapters.sources.git import GitFetcher
from berth.core.errors import RuntimeFailure
from berth.core.models import BuildSpec, GitSource
from berth.core.outbound import OutboundGuard
from deploy_support import (
    ECHO_V1,
    TRANSPORTS,
    Stack,
    environ_of,
    host_port,
    open_stack,
    steps,
    wait_final,
    wait_until,
)
from git_support import GitRepo, SmartHandler, served_repo
from harness import Api, problem
from infra import Sshd, docker_client

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, echo_image: str, sshd: Sshd) -> Iterator[Stack]:
    """``berth serve --local``: alice owns the local server and an SSH server, bob one."""
    private = {"BERTH_ALLOW_PRIVATE_TARGETS": "1"}  # the Git repositories are on 127.0.0.1
    with open_stack(tmp_path_factory.mktemp("builds"), sshd, "build", private) as opened:
        yield opened


def context_tar(files: dict[str, str], *, gzip: bool = False) -> bytes:
    """A build context: ``files`` (path → text) in a tar archive (gzipped if asked)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz" if gzip else "w") as archive:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mtime = int(time.time())
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def dockerfile(built: str, *more: str) -> str:
    """A Dockerfile from the echo image that sets ``BUILT`` (and ``more`` lines)."""
    return "\n".join([f"FROM {ECHO_V1}", f"ENV BUILT={built}", *more, ""])


def upload(api: Api, body: bytes, media: str = "application/x-tar") -> httpx.Response:
    return api.post("/api/agent/sources", content=body, headers={"Content-Type": media})


def uploaded(api: Api, files: dict[str, str], *, gzip: bool = False) -> str:
    """Upload ``files`` as a context; its source id."""
    media = "application/gzip" if gzip else "application/x-tar"
    response = upload(api, context_tar(files, gzip=gzip), media)
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def deploy_build(
    api: Api, server_id: str, name: str, port: int, build: dict[str, Any], wait: int | None = 120
) -> httpx.Response:
    body = {"serverId": server_id, "name": name, "build": build, "port": port}
    body["env"] = {"PORT": str(port)}
    return api.post(
        "/api/agent/docker/deploy",
        params={"wait": wait} if wait else None,
        json=body,
        timeout=(wait or 0) + 30,
    )


def final(api: Api, response: httpx.Response, state: str) -> dict[str, Any]:
    """The deployment ``response`` queued, once final; it must have ended in ``state``."""
    assert response.status_code in (200, 202), response.text
    deployment: dict[str, Any] = response.json()["deployment"]
    if deployment["state"] not in ("succeeded", "failed", "canceled", "timed_out"):
        deployment = wait_final(api, deployment["id"], 120)
    assert deployment["state"] == state, deployment
    return deployment


def built(api: Api, server_id: str, name: str, port: int, built: str) -> dict[str, Any]:
    """Deploy a build of the echo image with ``BUILT=built``; the succeeded deployment."""
    source = uploaded(api, {"Dockerfile": dockerfile(built)})
    return final(api, deploy_build(api, server_id, name, port, {"sourceId": source}), "succeeded")


def rolled_back(api: Api, first: dict[str, Any]) -> dict[str, Any]:
    """Roll ``first``'s installation back to ``first``; the succeeded rollback."""
    response = api.post(
        f"/api/agent/installations/{first['installationId']}/rollback",
        params={"wait": 120},
        json={"deploymentId": first["id"]},
        timeout=150,
    )
    return final(api, response, "succeeded")


def build_containers(marker: str) -> list[str]:
    """Containers whose environment holds ``BUILT=<marker>``: a build's RUN step's."""
    client = docker_client()
    found = []
    for row in client.api.containers(all=True):
        try:
            env = client.api.inspect_container(row["Id"])["Config"].get("Env") or []
        except Exception:
            continue
        if f"BUILT={marker}" in env:
            found.append(row["Id"])
    return found


@pytest.fixture(params=TRANSPORTS)
def target(request: pytest.FixtureRequest, stack: Stack) -> tuple[Api, str, str]:
    """``(api, server id, transport)`` of one of alice's servers."""
    transport: str = request.param
    return stack.alice.api, stack.alice.servers[transport], transport


def test_an_upload_is_stored_with_its_sha256_and_size(stack: Stack) -> None:
    """POST /sources answers 201 with the id, the SHA-256 and size of the bytes, and when it
    expires (a day on)."""
    import hashlib

    body = context_tar({"Dockerfile": dockerfile("x")})
    response = upload(stack.alice.api, body)
    assert response.status_code == 201, response.text
    answer = response.json()
    assert answer["sha256"] == hashlib.sha256(body).hexdigest()
    assert answer["size"] == len(body)
    assert uuid.UUID(answer["id"])
    assert answer["expiresAt"] > answer["expiresAt"][:4]  # an RFC 3339 time


def test_an_upload_that_is_no_tar_or_of_another_type_is_refused(stack: Stack) -> None:
    """A body that is not a tar archive is a 422; a JSON one a 415."""
    refused = problem(upload(stack.alice.api, b"not a tar archive at all" * 40), 422)
    assert refused["errors"][0]["location"] == "body"
    problem(stack.alice.api.post("/api/agent/sources", json={"a": 1}), 415)


def test_an_upload_deploys_built_on_the_server(target: tuple[Api, str, str], stack: Stack) -> None:
    """A deploy of an uploaded context builds it on the server (step ``build``, the image
    tagged berth/<containerName>:<deployment id prefix>) and the built image answers."""
    api, server_id, transport = target
    port = host_port()
    name = stack.name(f"upload-{transport}")
    source = uploaded(api, {"Dockerfile": dockerfile("one")}, gzip=True)
    response = deploy_build(api, server_id, name, port, {"sourceId": source})
    deployment = final(api, response, "succeeded")
    assert "build" in steps(deployment)
    assert deployment["build"]["sourceId"] == source
    tag = f"berth/{name}:{uuid.UUID(deployment['id']).hex[:12]}"
    assert deployment["image"] == tag
    assert docker_client().api.inspect_image(tag)["Id"] == deployment["imageId"]
    assert environ_of(port)["BUILT"] == "one"


def test_a_redeploy_builds_again_and_a_rollback_does_not(
    target: tuple[Api, str, str], stack: Stack
) -> None:
    """A second build serves the new version; a rollback runs the first build's image
    again without a build step."""
    api, server_id, transport = target
    port = host_port()
    name = stack.name(f"rollback-{transport}")
    first = built(api, server_id, name, port, "one")
    second = built(api, server_id, name, port, "two")
    assert environ_of(port)["BUILT"] == "two"
    assert second["imageId"] != first["imageId"]
    back = rolled_back(api, first)
    assert "build" not in steps(back)
    assert back["imageId"] == first["imageId"]
    assert environ_of(port)["BUILT"] == "one"


def test_a_broken_build_fails_at_build_and_the_old_version_answers(
    target: tuple[Api, str, str], stack: Stack
) -> None:
    """A Dockerfile that cannot build fails at step ``build`` with the builder's error
    line; the version serving before keeps answering."""
    api, server_id, transport = target
    port = host_port()
    name = stack.name(f"broken-{transport}")
    built(api, server_id, name, port, "good")
    broken = uploaded(api, {"Dockerfile": dockerfile("bad", "COPY no-such-file /x")})
    failed = final(api, deploy_build(api, server_id, name, port, {"sourceId": broken}), "failed")
    assert failed["step"] == "build"
    assert failed["error"].startswith("build: ")
    assert "no-such-file" in failed["error"], failed["error"]
    assert environ_of(port)["BUILT"] == "good"


def test_a_subdirectory_context_and_a_dockerfile_path_build(stack: Stack) -> None:
    """``context`` picks a subdirectory of the upload and ``dockerfile`` a path in it; a
    build argument reaches the Dockerfile."""
    api, server_id = stack.alice.api, stack.alice.servers["local"]
    port = host_port()
    files = {
        "README": "not part of the context",
        "web/docker/App.dockerfile": "\n".join(
            [f"FROM {ECHO_V1}", "ARG FLAVOUR", "ENV BUILT=sub-$FLAVOUR", ""]
        ),
    }
    build = {
        "sourceId": uploaded(api, files),
        "context": "web",
        "dockerfile": "docker/App.dockerfile",
        "args": {"FLAVOUR": "mint"},
    }
    final(api, deploy_build(api, server_id, stack.name("subdir"), port, build), "succeeded")
    assert environ_of(port)["BUILT"] == "sub-mint"


def test_another_teams_source_is_not_found(stack: Stack) -> None:
    """Bob cannot build from Alice's upload: a 404 at body.build.sourceId, nothing queued."""
    source = uploaded(stack.alice.api, {"Dockerfile": dockerfile("alice")})
    bob = stack.bob
    build = {"sourceId": source}
    response = deploy_build(bob.api, bob.servers["ssh"], stack.name("bobs"), host_port(), build)
    refused = problem(response, 404)
    assert [e["location"] for e in refused["errors"]] == ["body.build.sourceId"]


def test_image_and_build_together_or_neither_are_refused(stack: Stack) -> None:
    """Exactly one of image and build: both, neither, or a build with bad fields is a 422
    naming every field."""
    api, server_id = stack.alice.api, stack.alice.servers["local"]
    base = {"serverId": server_id, "name": stack.name("rules")}
    both = api.post(
        "/api/agent/docker/deploy",
        json={**base, "image": ECHO_V1, "build": {"sourceId": str(uuid.uuid4())}},
    )
    assert [e["location"] for e in problem(both, 422)["errors"]] == ["body.build"]
    neither = api.post("/api/agent/docker/deploy", json=base)
    assert [e["location"] for e in problem(neither, 422)["errors"]] == ["body.image"]
    bad = api.post(
        "/api/agent/docker/deploy",
        json={
            **base,
            "build": {
                "git": {"url": "ftp://example.com/x.git", "ref": "-x"},
                "context": "../up",
                "target": "",
            },
        },
    )
    locations = {e["location"] for e in problem(bad, 422)["errors"]}
    assert locations == {
        "body.build.git.url",
        "body.build.git.ref",
        "body.build.context",
        "body.build.target",
    }


def test_a_build_can_be_canceled_and_the_old_version_answers(
    target: tuple[Api, str, str], stack: Stack
) -> None:
    """Cancelling a deployment while its build runs (a RUN step that never ends) ends it
    ``canceled`` at step build; the build's container goes and the old version answers."""
    api, server_id, transport = target
    port = host_port()
    name = stack.name(f"cancel-{transport}")
    built(api, server_id, name, port, "old")
    marker = f"never-{transport}-{uuid.uuid4().hex[:8]}"
    endless = uploaded(api, {"Dockerfile": dockerfile(marker, 'RUN ["/server"]')})
    response = deploy_build(api, server_id, name, port, {"sourceId": endless}, wait=None)
    assert response.status_code == 202, response.text
    deployment_id = response.json()["deployment"]["id"]
    wait_until(lambda: build_containers(marker), bool, 60, "the build's RUN step running")
    canceled = api.post(
        f"/api/agent/deployments/{deployment_id}/cancel", params={"wait": 30}, timeout=60
    )
    assert canceled.status_code == 200, canceled.text
    ended = canceled.json()
    assert ended["state"] == "canceled", ended
    assert ended["step"] == "build"
    assert environ_of(port)["BUILT"] == "old"
    wait_until(lambda: build_containers(marker), lambda left: not left, 30, "RUN container gone")


# -- Git ------------------------------------------------------------------------------------


@pytest.fixture
def repo(tmp_path: Path) -> Iterator[GitRepo]:
    """An empty repository (branch ``main``) served at ``http://127.0.0.1:<port>/app.git``."""
    with served_repo(tmp_path) as made:
        yield made


def test_a_git_repository_deploys_and_a_new_commit_redeploys(
    target: tuple[Api, str, str], stack: Stack, repo: GitRepo
) -> None:
    """A deploy from Git builds the branch's commit (recorded on the deployment); after a
    new commit, a redeploy builds that one; a rollback goes back without a build."""
    api, server_id, transport = target
    port = host_port()
    name = stack.name(f"git-{transport}")
    first_commit = repo.commit({"Dockerfile": dockerfile("git-one")}, "first")
    build = {"git": {"url": repo.url, "ref": "main"}}
    first = final(api, deploy_build(api, server_id, name, port, build), "succeeded")
    assert first["commit"] == first_commit
    assert environ_of(port)["BUILT"] == "git-one"
    second_commit = repo.commit({"Dockerfile": dockerfile("git-two")}, "second")
    second = final(api, deploy_build(api, server_id, name, port, build), "succeeded")
    assert second["commit"] == second_commit
    assert environ_of(port)["BUILT"] == "git-two"
    back = rolled_back(api, first)
    assert "build" not in steps(back)
    assert back["commit"] == first_commit
    assert environ_of(port)["BUILT"] == "git-one"


def test_a_git_host_speaking_smart_http_is_fetched_too(stack: Stack, tmp_path: Path) -> None:
    """A repository served as Git hosts serve it (smart HTTP, where a fetch is shallow)
    deploys its branch's commit, as one served as plain files does."""
    api, server_id = stack.alice.api, stack.alice.servers["local"]
    with served_repo(tmp_path, SmartHandler) as smart:
        commit = smart.commit({"Dockerfile": dockerfile("smart")}, "only")
        port = host_port()
        build = {"git": {"url": smart.url, "ref": "main"}}
        done = final(
            api, deploy_build(api, server_id, stack.name("smart"), port, build), "succeeded"
        )
    assert done["commit"] == commit
    assert environ_of(port)["BUILT"] == "smart"


def test_a_missing_ref_fails_at_build(stack: Stack, repo: GitRepo) -> None:
    """A ref the repository lacks fails at step build saying git could not fetch it."""
    api, server_id = stack.alice.api, stack.alice.servers["local"]
    repo.commit({"Dockerfile": dockerfile("x")}, "only")
    build = {"git": {"url": repo.url, "ref": "no-such-branch"}}
    failed = final(
        api, deploy_build(api, server_id, stack.name("noref"), host_port(), build), "failed"
    )
    assert failed["step"] == "build"
    assert "git fetch failed" in failed["error"], failed["error"]


def _programs_logged(where: Path) -> tuple[Path, Path]:
    """A ``git`` that logs each program berth starts (its subcommand) and runs git."""
    log = where / "git-programs.log"
    (where / "bin").mkdir()
    wrapper = where / "bin" / "git"
    real = shutil.which("git")
    wrapper.write_text(f'#!/bin/sh\necho "$1" >> {log}\nexec {real} "$@"\n')
    wrapper.chmod(0o755)
    return wrapper, log


async def test_a_git_context_is_fetched_with_three_programs(tmp_path: Path) -> None:
    """Making a Git build's context ready starts three git programs (init, one fetch of
    the branch from a smart HTTP host, archive) and gives the commit's tree as a tar,
    .git left out, modes as a checkout's; a subdirectory context is that directory's
    tree, a missing one fails saying it is not in the commit; an annotated tag builds
    (and records) its commit."""
    wrapper, log = _programs_logged(tmp_path)
    guard = OutboundGuard(SystemResolver(), allow_private=True)
    sources = LocalBuildSources(
        DiskSourceStore(tmp_path / "sources"),
        GitFetcher(guard, git=str(wrapper)),
        scratch=tmp_path / "scratch",
        clock=lambda: datetime.now(UTC),
    )

    def no_secret(_: str) -> None:
        pass

    (tmp_path / "git").mkdir()
    with served_repo(tmp_path / "git", SmartHandler) as repo:
        repo.commit({"Dockerfile": "FROM x\n", "web/run.sh": "echo hi\n"}, "first")
        (repo.work / "web" / "run.sh").chmod(0o755)
        commit = repo.commit({}, "executable")
        git = GitSource(url=repo.url, ref="main")
        async with sources.prepare(uuid.uuid4(), BuildSpec(git=git), no_secret) as context:
            assert context.commit == commit
            with tarfile.open(context.path) as archive:
                modes = {m.name: m.mode for m in archive.getmembers() if m.isfile()}
        assert log.read_text().split() == ["init", "fetch", "archive"]
        assert modes == {"Dockerfile": 0o644, "web/run.sh": 0o755}
        sub = BuildSpec(git=git, context="web")
        async with sources.prepare(uuid.uuid4(), sub, no_secret) as context:
            with tarfile.open(context.path) as archive:
                assert [m.name for m in archive.getmembers() if m.isfile()] == ["run.sh"]
        missing = BuildSpec(git=git, context="nope")
        with pytest.raises(RuntimeFailure, match=f"'nope' is not in commit {commit}"):
            async with sources.prepare(uuid.uuid4(), missing, no_secret):
                pass
        repo.git("tag", "-a", "v1", "-m", "the first release")
        repo.git("push", "-q", "origin", "v1")
        tagged = BuildSpec(git=GitSource(url=repo.url, ref="v1"))
        async with sources.prepare(uuid.uuid4(), tagged, no_secret) as context:
            assert context.commit == commit  # the tag's commit, not the tag's own object
