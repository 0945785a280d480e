"""``HostKeySignatures``: SSHSIG signatures (``ssh-keygen -Y sign``) checked against a
server's pinned host keys.

The SSHSIG format (OpenSSH's PROTOCOL.sshsig): ``"SSHSIG"``, version 1, the signer's
public key, the namespace, a reserved string, the hash algorithm and the signature,
which signs ``"SSHSIG"`` + namespace + reserved + hash algorithm + H(message). The key
must be one of the pinned ones; asyncssh (imported on first use: it is 15 MiB) checks
the signature itself.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import struct

__all__ = ["SshSignatures"]

_MAGIC = b"SSHSIG"
_HASHES = {b"sha256", b"sha512"}


def _string(value: bytes) -> bytes:
    return struct.pack(">I", len(value)) + value


def _fields(blob: bytes) -> list[bytes] | None:
    """The five strings after magic and version, or None if malformed."""
    if not blob.startswith(_MAGIC) or len(blob) < 10:
        return None
    if struct.unpack(">I", blob[6:10])[0] != 1:
        return None
    found, at = [], 10
    for _ in range(5):
        if at + 4 > len(blob):
            return None
        size = struct.unpack(">I", blob[at : at + 4])[0]
        at += 4
        if at + size > len(blob):
            return None
        found.append(blob[at : at + size])
        at += size
    return found if at == len(blob) else None


class SshSignatures:
    """Checks SSHSIG blobs against pinned ``type base64`` host key lines."""

    def verify(
        self, host_keys: tuple[str, ...], namespace: str, message: bytes, signature: bytes
    ) -> bool:
        fields = _fields(signature)
        if fields is None:
            return False
        public, signed_namespace, reserved, hash_name, signed = fields
        if signed_namespace != namespace.encode() or hash_name not in _HASHES:
            return False
        pinned = {line.split()[1] for line in host_keys if len(line.split()) >= 2}
        encoded = base64.b64encode(public).decode()
        if encoded not in pinned:
            return False
        import asyncssh

        try:
            key = asyncssh.import_public_key(f"{_key_type(public)} {encoded}")
            digest = hashlib.new(hash_name.decode(), message).digest()
            data = (
                _MAGIC
                + _string(signed_namespace)
                + _string(reserved)
                + _string(hash_name)
                + _string(digest)
            )
            return bool(key.verify(data, signed))
        except (asyncssh.KeyImportError, ValueError, binascii.Error):
            return False


def _key_type(public: bytes) -> str:
    size = struct.unpack(">I", public[:4])[0] if len(public) >= 4 else 0
    return public[4 : 4 + size].decode("ascii", "replace")
