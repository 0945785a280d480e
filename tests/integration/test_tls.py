"""TLS by Caddy's own rule, with a real Caddy and no forced issuer: a name that cannot get
a public certificate (``blog.localhost``) is served by Caddy's internal CA — a real TLS
handshake with SNI completes, verified against that CA's root from Caddy's data dir —
and berth's own check through Caddy (from the server, over the transport) reports
``tls: ready``; a public name, which ACME cannot certify here, is reported ``pending``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from deploy_support import (
    ECHO_V1,
    RUN,
    TRANSPORTS,
    behind_caddy,
    deploy,
    deployed,
    get_json,
    steps,
)
from harness import Api
from infra import Caddy, Sshd, build_echo_image, https_get

pytestmark = pytest.mark.integration

APP_PORT = 8080


@pytest.fixture(scope="module", params=TRANSPORTS)
def stack(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    docker_ready: None,
    sshd: Sshd,
) -> Iterator[tuple[Api, str, Caddy, str]]:
    """A Caddy and a berth using it with BERTH_TLS_ISSUER unset (auto), one online server."""
    transport: str = request.param
    build_echo_image("v1")
    prefix = f"e2e-{RUN}-tls-{transport}-"
    with behind_caddy(
        tmp_path_factory.mktemp(f"tls-{transport}"),
        transport,
        sshd,
        prefix,
        user=f"tls-{transport}",
        env={"BERTH_TLS_ISSUER": None},  # unset: Caddy's own rule
    ) as (_, caddy, api, server_id):
        yield api, server_id, caddy, prefix


def _deploy(api: Api, server_id: str, name: str, domain: str) -> tuple[Any, Any]:
    return deployed(
        deploy(api, server_id, name, APP_PORT, image=ECHO_V1, domain=domain),
        "succeeded",
    )


def test_a_localhost_name_gets_the_internal_ca_and_a_real_handshake(
    stack: tuple[Api, str, Caddy, str],
) -> None:
    """blog.localhost: Caddy's internal issuer; an SNI handshake verified against its root
    completes and the app answers; berth reports tls ready (internal), after step tls."""
    api, server_id, caddy, prefix = stack
    deployment, installation = _deploy(api, server_id, f"{prefix}blog", "blog.localhost")
    assert steps(deployment).index("route") < steps(deployment).index("tls")
    tls = installation["tls"]
    assert tls["state"] == "ready", tls
    assert tls["issuer"] == "internal"
    assert tls["reason"] is None

    status, _, body = https_get(caddy.https_port, "blog.localhost", caddy.root_ca_path)
    assert (status, body) == (200, b"hello from v1\n")
    policies = caddy.config()["apps"]["tls"]["automation"]["policies"]  # type: ignore[index]
    assert policies == [
        {"subjects": ["blog.localhost"], "issuers": [{"module": "internal"}], "on_demand": True}
    ]
    listed = get_json(api, "/api/agent/install", serverId=server_id)["installations"]
    assert next(i for i in listed if i["id"] == installation["id"])["tls"]["state"] == "ready"


def test_a_public_name_is_acmes_and_pending_here(stack: tuple[Api, str, Caddy, str]) -> None:
    """A public name goes to ACME, which cannot certify it here: the deployment succeeds
    (the app is routed), and tls is pending with the reason."""
    api, server_id, _caddy, prefix = stack
    domain = f"shop-{RUN}.example.com"
    _, installation = _deploy(api, server_id, f"{prefix}shop", domain)
    tls = installation["tls"]
    assert tls["issuer"] == "acme"
    assert tls["state"] == "pending", tls
    assert domain in tls["reason"]
