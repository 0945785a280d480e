"""berth's per-server SSH keys: generated here, authorized on the server forward-only."""

from __future__ import annotations

import asyncssh
from berth.core.types import KEY_RESTRICTIONS

__all__ = ["authorized_keys_line", "generate_keypair"]


def generate_keypair(comment: str) -> tuple[bytes, str]:
    """A fresh ed25519 key pair: the OpenSSH private key (unencrypted PEM-like bytes, to
    be sealed before storage) and its public line ``"ssh-ed25519 AAAA… <comment>"``.

    Raises ``ValueError`` if ``comment`` holds a line break (it would split the line).
    """
    if "\n" in comment or "\r" in comment:
        raise ValueError("A key comment cannot hold a line break.")
    key = asyncssh.generate_private_key("ssh-ed25519", comment=comment or None)
    private = bytes(key.export_private_key("openssh"))
    public = bytes(key.export_public_key("openssh")).decode("ascii").strip()
    return private, public


def authorized_keys_line(public_key: str) -> str:
    """The ``authorized_keys`` line that lets ``public_key`` forward and nothing else:
    ``<KEY_RESTRICTIONS> <public key>``.

    Raises ``ValueError`` unless ``public_key`` is exactly one valid OpenSSH public key
    line (so no second line, and no options of its own, can ride along).
    """
    line = public_key.strip()
    if not line or "\n" in line or "\r" in line:
        raise ValueError("Expected one OpenSSH public key line.")
    try:
        asyncssh.import_public_key(line)
    except (asyncssh.KeyImportError, ValueError) as exc:
        raise ValueError("Not an OpenSSH public key line.") from exc
    return f"{KEY_RESTRICTIONS} {line}"
