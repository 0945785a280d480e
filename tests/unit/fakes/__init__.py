"""In-memory fakes of the ports in ``berth.core.ports``.

They satisfy the Protocols structurally (no inheritance) and keep the promises
the Protocols document: the ownership rule (another user's row looks exactly
like a missing one), the uniqueness rules (raising ``Conflict``), and
transactions (a unit of work sees a private copy of the store; ``commit``
publishes it; leaving without a commit throws it away).

The server-side fakes (runtime, gateway, fleet, job queue) are scripted by the
test and record every call, so a test can state what reached the server.

The same behaviour is expected of the SQL adapter; ``test_store_model.py``
runs one state machine against both to keep this fake honest.
"""

from __future__ import annotations

from .archive import FakeArchive
from .basics import (
    EPOCH,
    HOST_KEY,
    PUBLIC_ADDRESS,
    FakeBox,
    FakeClock,
    FakeHasher,
    FakeKeys,
    FakeResolver,
    FakeSender,
)
from .fleet import FakeFleet
from .gateway import FakeGateway, FakeProxy
from .jobs import FakeJobQueue
from .runtime import FakeRuntime, Health
from .sources import FakeBuildSources
from .store import FakeDeploymentRepository, FakeInstallationRepository, FakeStore
from .uow import FakeUnitOfWorkFactory

__all__ = [
    "EPOCH",
    "HOST_KEY",
    "PUBLIC_ADDRESS",
    "FakeArchive",
    "FakeBox",
    "FakeBuildSources",
    "FakeClock",
    "FakeDeploymentRepository",
    "FakeFleet",
    "FakeGateway",
    "FakeHasher",
    "FakeInstallationRepository",
    "FakeJobQueue",
    "FakeKeys",
    "FakeProxy",
    "FakeResolver",
    "FakeRuntime",
    "FakeSender",
    "FakeStore",
    "FakeUnitOfWorkFactory",
    "Health",
]
