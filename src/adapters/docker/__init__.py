"""Docker Engine through the docker SDK: the ``ContainerRuntime`` port.

Works against any Engine socket — the local one, or one forwarded over SSH (the SSH
adapter hands over its ``unix://`` path; this package never imports it).
"""

from __future__ import annotations

from .runtime import DockerRuntime

__all__ = ["DockerRuntime"]
