"""API and enrollment tokens: format, checksum, hashing. Pure functions.

An API token is ``berth_`` + 43 base62 characters (256 bits of randomness) +
a 6-character base62 CRC-32 checksum of those 43, so a mistyped or truncated
token is refused before any look-up and secret scanners can recognise it.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import zlib

__all__ = [
    "API_PREFIX",
    "ENROLL_PREFIX",
    "INVITE_PREFIX",
    "SETUP_PREFIX",
    "display_prefix",
    "generate",
    "hash_token",
    "is_well_formed",
    "same_hash",
]

API_PREFIX = "berth_"
ENROLL_PREFIX = "berth_enroll_"
INVITE_PREFIX = "berth_invite_"
SETUP_PREFIX = "berth_setup_"  # the first account's one-time code (``berth serve`` prints it)
_ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_RANDOM_LEN = 43  # 62**43 > 2**256
_CHECK_LEN = 6  # 62**6 > 2**32
_BODY = re.compile(rf"^[0-9A-Za-z]{{{_RANDOM_LEN + _CHECK_LEN}}}$")


def _base62(number: int, width: int) -> str:
    digits = []
    for _ in range(width):
        number, rem = divmod(number, 62)
        digits.append(_ALPHABET[rem])
    return "".join(reversed(digits))


def _checksum(random_part: str) -> str:
    return _base62(zlib.crc32(random_part.encode("ascii")), _CHECK_LEN)


def generate(prefix: str = API_PREFIX) -> str:
    """A new token with ``prefix``: 256 random bits and a checksum."""
    random_part = "".join(secrets.choice(_ALPHABET) for _ in range(_RANDOM_LEN))
    return prefix + random_part + _checksum(random_part)


def is_well_formed(token: str, prefix: str = API_PREFIX) -> bool:
    """Prefix, length, alphabet and checksum all right (no look-up needed)."""
    if not token.startswith(prefix):
        return False
    body = token[len(prefix) :]
    if not _BODY.fullmatch(body):
        return False
    random_part, check = body[:_RANDOM_LEN], body[_RANDOM_LEN:]
    return hmac.compare_digest(_checksum(random_part), check)


def hash_token(token: str) -> str:
    """What is stored: the SHA-256 of the whole token, hex."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def same_hash(a: str, b: str) -> bool:
    """Constant-time comparison of two token hashes."""
    return hmac.compare_digest(a.encode("ascii"), b.encode("ascii"))


def display_prefix(token: str) -> str:
    """The first characters, safe to show: ``berth_`` and four more."""
    return token[: len(API_PREFIX) + 4]
