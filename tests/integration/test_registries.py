"""Private registries end to end: credentials saved through the API, and deploys that
pull from a real registry (``docker-registry`` with htpasswd auth on 127.0.0.1) over SSH
and locally, or fail saying which of "not found", "unauthorized" and "registry
unreachable" happened — leaving no container behind.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import socket
import tarfile
import uuid
from collections.abc import Iterator
from typing import Any

import docker.errors
import httpx
import pytest
from deploy_support import (
    RUN,
    TRANSPORTS,
    Stack,
    containers_of,
    deploy,
    deployed,
    get_json,
    host_port,
    steps,
)
from harness import Api, problem
from infra import docker_client
from registry_support import RegistryServer

pytestmark = pytest.mark.integration

BLOB_BYTES = 4 * 1024 * 1024  # a layer of its own, so a pull downloads something
PULL_TIMEOUT = 8  # seconds: well above a pull here, well below Docker's own 25 s or so


STACK_ENV = {"BERTH_PULL_TIMEOUT": str(PULL_TIMEOUT)}


@pytest.fixture
def private_image(echo_image: str) -> Iterator[str]:
    """The echo image plus a 4 MiB random layer, built for this test (a local tag,
    removed at the end with what this test pulled of it)."""
    tag = f"berth-test/private-{RUN}-{uuid.uuid4().hex[:8]}:v1"
    dockerfile = f"FROM {echo_image}\nCOPY blob /blob\n".encode()
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as tar:
        for name, data in (("Dockerfile", dockerfile), ("blob", os.urandom(BLOB_BYTES))):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    context.seek(0)
    client = docker_client(timeout=120.0)
    try:
        client.images.build(fileobj=context, custom_context=True, tag=tag, rm=True)
    finally:
        client.close()
    yield tag
    remove_image(tag)
    client = docker_client()
    try:
        for image in client.api.images():
            for ref in image.get("RepoTags") or []:
                if "/berth/" in ref and f"-{RUN}:" in ref:  # what a deploy pulled
                    remove_image(ref)
    finally:
        client.close()


def pushed(registry: RegistryServer, local: str, name: str) -> str:
    """``local`` pushed as ``<registry>/berth/<name>-<run>:v1``, absent locally: a deploy
    of it must pull (its new layer too, once no other tag holds the image)."""
    return registry.push(local, f"berth/{name}-{RUN}", "v1")


def remove_image(ref: str) -> None:
    """Untag (and delete, if nothing else holds it) ``ref``; absent is fine."""
    client = docker_client()
    try:
        with contextlib.suppress(docker.errors.ImageNotFound):
            client.api.remove_image(ref, force=True)
    finally:
        client.close()


def save_registry(api: Api, host: str, username: str, password: str) -> dict[str, Any]:
    response = api.post(
        "/api/agent/registries", json={"host": host, "username": username, "password": password}
    )
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


def forget_registries(api: Api) -> None:
    for saved in get_json(api, "/api/agent/registries")["registries"]:
        assert api.delete(f"/api/agent/registries/{saved['id']}").status_code == 204


@pytest.fixture
def alice(stack: Stack, registry: RegistryServer) -> Iterator[Api]:
    """Alice's API with the registry's right credentials saved (forgotten afterwards)."""
    api = stack.alice.api
    forget_registries(api)
    save_registry(api, registry.host, registry.username, registry.password)
    yield api
    forget_registries(api)


def assert_failed_cleanly(response: Any, cause: str) -> dict[str, Any]:
    """A ``?wait`` deploy that failed at pull with ``cause`` first, leaving nothing behind."""
    deployment, installation = deployed(response, "failed")
    assert deployment["step"] == "pull"
    assert deployment["error"].startswith(f"pull: {cause}: "), deployment["error"]
    assert "create" not in steps(deployment)
    assert installation["status"] == "failed"
    assert containers_of(installation["id"]) == []
    return deployment


def _deploy(
    stack: Stack, api: Api, transport: str, what: str, image: str, port: int | None = None
) -> httpx.Response:
    """Deploy ``image`` as the app ``<what>-<transport>`` on alice's server of ``transport``
    (on a free host port unless ``port``)."""
    return deploy(
        api,
        stack.alice.servers[transport],
        stack.name(f"{what}-{transport}"),
        port or host_port(),
        image=image,
    )


class TestCredentialsApi:
    """``/api/agent/registries``: saved per user, never returned, strictly checked."""

    def test_saved_listed_and_removed_never_showing_the_password(
        self, stack: Stack, registry: RegistryServer
    ) -> None:
        """The list shows host and user, never the password; DELETE forgets it."""
        api = stack.bob.api
        forget_registries(api)
        secret = f"s3cret-{uuid.uuid4().hex}"
        saved = save_registry(api, "Registry.Example.com:5000", "bot", secret)
        assert set(saved) == {"id", "host", "username", "createdAt"}
        assert saved["host"] == "registry.example.com:5000"
        listing = api.get("/api/agent/registries")
        assert secret not in listing.text
        assert [r["id"] for r in listing.json()["registries"]] == [saved["id"]]
        assert api.delete(f"/api/agent/registries/{saved['id']}").status_code == 204
        assert get_json(api, "/api/agent/registries")["registries"] == []
        assert secret not in stack.berth.log_path.read_text()  # type: ignore[union-attr]

    def test_one_entry_per_host(self, stack: Stack) -> None:
        """A second entry for the same host (in any case) is a 409 registry-exists."""
        api = stack.bob.api
        forget_registries(api)
        save_registry(api, "dup.example.com", "a", "pw-one")
        body = problem(
            api.post(
                "/api/agent/registries",
                json={"host": "DUP.example.com", "username": "b", "password": "pw-two"},
            ),
            409,
        )
        assert body["type"] == "urn:berth:problem:registry-exists"
        forget_registries(api)

    def test_another_users_registry_is_not_found(self, stack: Stack) -> None:
        """Bob cannot see or remove alice's registry: 404, as for an unknown id."""
        forget_registries(stack.alice.api)
        saved = save_registry(stack.alice.api, "alice.example.com", "alice", "pw")
        assert get_json(stack.bob.api, "/api/agent/registries")["registries"] == []
        problem(stack.bob.api.delete(f"/api/agent/registries/{saved['id']}"), 404)
        problem(stack.bob.api.delete(f"/api/agent/registries/{uuid.uuid4()}"), 404)
        problem(stack.bob.api.delete("/api/agent/registries/not-a-uuid"), 404)
        assert [
            r["id"] for r in get_json(stack.alice.api, "/api/agent/registries")["registries"]
        ] == [saved["id"]]
        forget_registries(stack.alice.api)

    @pytest.mark.parametrize(
        "host",
        [
            "https://registry.example.com",
            "registry.example.com/path",
            "registry.example.com:5000/",
            " registry.example.com",
            "registry example.com",
            "registry.example.com:0",
            "registry.example.com:65536",
            "registry.example.com:",
            "user@registry.example.com",
            "-bad.example.com",
            "myregistry",
            "",
            "a" * 300 + ".com",
        ],
    )
    def test_hostile_hosts_are_refused(self, stack: Stack, host: str) -> None:
        """A host that is not ``hostname[:port]`` is a 422 at body.host; nothing is saved."""
        api = stack.bob.api
        forget_registries(api)
        body = problem(
            api.post(
                "/api/agent/registries", json={"host": host, "username": "u", "password": "pw"}
            ),
            422,
        )
        assert [e["location"] for e in body["errors"]] == ["body.host"]
        assert get_json(api, "/api/agent/registries")["registries"] == []

    def test_every_bad_field_at_once_and_the_password_never_echoed(self, stack: Stack) -> None:
        """Every broken rule is listed at once; the password's error does not echo it."""
        api = stack.bob.api
        response = api.post(
            "/api/agent/registries",
            json={"host": "ftp://x", "username": "a:b", "password": "", "extra": "x"},
        )
        body = problem(response, 422)
        assert {e["location"] for e in body["errors"]} == {
            "body.host",
            "body.username",
            "body.password",
            "body.extra",
        }
        wrong_type = problem(
            api.post(
                "/api/agent/registries",
                json={"host": "x.io", "username": "u", "password": ["hunter2-secret"]},
            ),
            422,
        )
        assert "hunter2-secret" not in str(wrong_type)


@pytest.mark.parametrize("transport", TRANSPORTS)
class TestPulls:
    """Deploys of an image that lives only in the private registry."""

    def test_pulls_with_the_saved_credentials(
        self,
        stack: Stack,
        registry: RegistryServer,
        private_image: str,
        alice: Api,
        transport: str,
    ) -> None:
        """The deploy pulls with alice's credentials, reports the pull's progress, and runs."""
        image = pushed(registry, private_image, f"app-{transport}")
        remove_image(private_image)  # no local tag holds the image: its layer is downloaded
        port = host_port()
        response = _deploy(stack, alice, transport, "pull", image, port=port)
        deployment, installation = deployed(response, "succeeded")
        messages = [e["message"] for e in deployment["events"] if e["step"] == "pull"]
        assert any(
            m.startswith(f"Pulling from {registry.host} with the credentials saved for user")
            for m in messages
        ), messages
        # The layer of its own was downloaded: 4 MiB, about 4.2 MB (gzip does not shrink it).
        assert any(
            re.fullmatch(rf"Pulled {re.escape(image)}: 2 layers, 4\.[0-9] MB downloaded\.", m)
            for m in messages
        ), messages
        assert installation["status"] == "running"
        assert len(containers_of(installation["id"])) == 1
        assert registry.password not in response.text
        assert registry.password not in stack.berth.log_path.read_text()  # type: ignore[union-attr]

    def test_no_credentials_is_unauthorized_and_says_how_to_fix_it(
        self, stack: Stack, registry: RegistryServer, private_image: str, transport: str
    ) -> None:
        """Without saved credentials the registry refuses: "unauthorized", with the fix."""
        forget_registries(stack.alice.api)
        image = pushed(registry, private_image, f"anon-{transport}")
        response = _deploy(stack, stack.alice.api, transport, "anon", image)
        deployment = assert_failed_cleanly(response, "unauthorized")
        assert f"berth registries add {registry.host}" in deployment["error"]

    def test_wrong_password_is_unauthorized(
        self, stack: Stack, registry: RegistryServer, private_image: str, transport: str
    ) -> None:
        """Wrong saved credentials: "unauthorized", naming the user; the password is not shown."""
        api = stack.alice.api
        forget_registries(api)
        wrong = f"wrong-{uuid.uuid4().hex}"
        save_registry(api, registry.host, registry.username, wrong)
        try:
            image = pushed(registry, private_image, f"wrong-{transport}")
            response = _deploy(stack, api, transport, "wrong", image)
            deployment = assert_failed_cleanly(response, "unauthorized")
            assert f"(user {registry.username})" in deployment["error"]
            assert wrong not in response.text
        finally:
            forget_registries(api)

    def test_missing_tag_is_not_found(
        self, stack: Stack, registry: RegistryServer, alice: Api, transport: str
    ) -> None:
        """A tag the registry does not have: "not found"."""
        image = f"{registry.host}/berth/app-{transport}-{RUN}:missing"
        response = _deploy(stack, alice, transport, "missing", image)
        assert_failed_cleanly(response, "not found")

    def test_stopped_registry_is_unreachable(
        self,
        stack: Stack,
        registry: RegistryServer,
        private_image: str,
        alice: Api,
        transport: str,
    ) -> None:
        """A registry that does not answer: "registry unreachable"."""
        image = pushed(registry, private_image, f"down-{transport}")
        with registry.stopped():
            response = _deploy(stack, alice, transport, "down", image)
            assert_failed_cleanly(response, "registry unreachable")

    def test_a_stalled_registry_fails_at_the_pull_deadline(
        self, stack: Stack, alice: Api, transport: str
    ) -> None:
        """A registry that accepts connections and never answers: the pull ends at its
        deadline (BERTH_PULL_TIMEOUT), saying so, with nothing left behind."""
        with socket.socket() as listener:
            listener.bind(("127.0.0.1", 0))
            listener.listen(16)
            host = f"127.0.0.1:{listener.getsockname()[1]}"
            save_registry(alice, host, "bot", "pw")
            response = _deploy(stack, alice, transport, "stalled", f"{host}/team/app:1")
        deployment, installation = deployed(response, "failed")
        assert deployment["error"] == f"pull: Did not finish within {PULL_TIMEOUT} s."
        assert installation["status"] == "failed"
        assert containers_of(installation["id"]) == []
