"""berth's HTTP API from Python: a typed client, blocking or async.

    from berth.client import Client

    with Client("http://127.0.0.1:8080", token) as berth:
        (server, *_) = berth.servers().servers
        queued = berth.deploy(server_id=server.id, name="shop", image="shop:1.0", wait=60)
        print(queued.deployment.state)

``AsyncClient`` has the same methods, awaited (streams are async iterators). Each
method is named as the library facade's (``berth.Berth``) method that does the same,
without its ``user``; requests and answers are the API's bodies as msgspec Structs
(``berth.client.models``: camelCase on the wire, snake_case here). An error answer raises
``ApiError`` (``status``, ``type``, ``title``, ``detail``, ``errors``, ``retry_after``);
``render_problem`` shows one to a person. The client is checked against the OpenAPI
document (``tests/unit/test_client_openapi.py``): an operation it lacks, or a body
whose fields differ, fails the build.

It imports only the standard library, httpx and msgspec: not berth's server.
"""

from __future__ import annotations

from . import models
from ._http import DEFAULT_URL, AsyncClient, Client
from ._operation import Operation, Response, StreamOperation
from .api import Api, Id
from .errors import (
    ApiError,
    BerthError,
    FieldProblem,
    UnexpectedAnswer,
    Unreachable,
    printable,
    render_problem,
)
from .models import FINAL_STATES, DeploymentEnd, DeploymentStep

__all__ = [
    "DEFAULT_URL",
    "FINAL_STATES",
    "Api",
    "ApiError",
    "AsyncClient",
    "BerthError",
    "Client",
    "DeploymentEnd",
    "DeploymentStep",
    "FieldProblem",
    "Id",
    "Operation",
    "Response",
    "StreamOperation",
    "UnexpectedAnswer",
    "Unreachable",
    "models",
    "printable",
    "render_problem",
]
