"""SSH transport (asyncssh): the ``ServerGateway`` port for servers with transport ``ssh``.

Pinned host keys only, one pooled connection per server, Docker reached through a
forwarded unix socket, probes through ``direct-tcpip``; never a shell or a command.
"""

from __future__ import annotations

from .gateway import SshConnection, SshGateway
from .keys import authorized_keys_line, generate_keypair

__all__ = [
    "SshConnection",
    "SshGateway",
    "authorized_keys_line",
    "generate_keypair",
]
