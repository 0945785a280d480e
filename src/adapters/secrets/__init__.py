"""Secrets: the data dir's key (AES-256-GCM sealing, HMAC digests) and argon2id passwords."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from pathlib import Path

from argon2 import PasswordHasher as _Argon2
from argon2.exceptions import InvalidHashError, VerificationError
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

__all__ = [
    "KEY_FILE",
    "Argon2Hasher",
    "KeyBox",
    "decode_key",
    "install_key",
    "load_or_create_key",
    "read_key_file",
]

KEY_FILE = "secret.key"
_KEY_FILE = KEY_FILE
_VERSION = b"\x01"


def load_or_create_key(data_dir: Path, env_value: str | None = None) -> bytes:
    """The 32-byte master key: from ``BERTH_SECRET_KEY`` (base64) or ``<data>/secret.key``.

    Generated on first start with mode 0600; there is no default key.
    """
    if env_value:
        return decode_key(env_value)
    path = data_dir / _KEY_FILE
    try:
        key = base64.urlsafe_b64decode(path.read_bytes().strip())
    except FileNotFoundError:
        data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        key = os.urandom(32)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(base64.urlsafe_b64encode(key) + b"\n")
        return key
    if len(key) != 32:
        raise ValueError(f"{path} does not hold a 32-byte key.")
    return key


def decode_key(env_value: str) -> bytes:
    """``BERTH_SECRET_KEY``'s 32 bytes (URL-safe base64, padding optional).

    Raises:
        ValueError: it is not 32 bytes of base64.
    """
    try:
        key = base64.urlsafe_b64decode(env_value.encode("ascii") + b"==")
    except (ValueError, UnicodeEncodeError):
        key = b""
    if len(key) != 32:
        raise ValueError("BERTH_SECRET_KEY must be 32 bytes, base64-encoded.")
    return key


def read_key_file(path: Path) -> bytes:
    """The 32-byte key in ``path`` (a data dir's ``secret.key``: base64, one line).

    Raises:
        FileNotFoundError: no such file.
        ValueError: it does not hold a 32-byte key.
    """
    try:
        key = base64.urlsafe_b64decode(path.read_bytes().strip())
    except (ValueError, TypeError):
        key = b""
    if len(key) != 32:
        raise ValueError(f"{path} does not hold a 32-byte key.")
    return key


def install_key(data_dir: Path, key: bytes) -> bool:
    """Write ``key`` as ``data_dir``'s ``secret.key`` (mode 0600); ``False`` when that
    very key is there already.

    Raises:
        FileExistsError: the data dir holds another key (never overwritten: what it
            sealed would be lost).
    """
    path = data_dir / KEY_FILE
    if path.exists():
        if read_key_file(path) == key:
            return False
        raise FileExistsError(f"{path} holds another key; move it away first.")
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(base64.urlsafe_b64encode(key) + b"\n")
    return True


class KeyBox:
    """``SecretBox`` with AES-256-GCM; sub-keys for sealing and digests are derived apart."""

    def __init__(self, master_key: bytes) -> None:
        self._aead = AESGCM(hmac.new(master_key, b"berth seal v1", hashlib.sha256).digest())
        self._mac_key = hmac.new(master_key, b"berth digest v1", hashlib.sha256).digest()

    def seal(self, plaintext: bytes) -> bytes:
        nonce = os.urandom(12)
        return _VERSION + nonce + self._aead.encrypt(nonce, plaintext, _VERSION)

    def open(self, sealed: bytes) -> bytes:
        if sealed[:1] != _VERSION or len(sealed) < 29:
            raise ValueError("Unknown sealed format.")
        try:
            return self._aead.decrypt(sealed[1:13], sealed[13:], _VERSION)
        except InvalidTag as exc:
            raise ValueError("Sealed data was tampered with or sealed with another key.") from exc

    def digest(self, data: bytes) -> str:
        return hmac.new(self._mac_key, data, hashlib.sha256).hexdigest()


class Argon2Hasher:
    """``PasswordHasher`` with argon2id (argon2-cffi's RFC 9106 low-memory profile)."""

    def __init__(self) -> None:
        self._ph = _Argon2()

    def hash(self, password: str) -> str:
        return self._ph.hash(password)

    def verify(self, password_hash: str, password: str) -> bool:
        try:
            return self._ph.verify(password_hash, password)
        except (VerificationError, InvalidHashError):
            return False
