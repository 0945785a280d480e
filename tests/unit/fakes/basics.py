"""Fakes of the small ports: the clock, the password hasher, the secret box, keys."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta

from berth.core import lifecycle
from berth.core.outbox import SendResult

__all__ = ["PUBLIC_ADDRESS", "FakeBox", "FakeClock", "FakeHasher", "FakeKeys", "FakeResolver"]


ACTIVE = tuple(sorted(lifecycle.ACTIVE))
EPOCH = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)


# --- clock, hasher, box ------------------------------------------------------------


class FakeClock:
    """A clock that stands still until a test moves it. Always aware UTC."""

    def __init__(self, start: datetime = EPOCH) -> None:
        self._now = _aware(start)

    def now(self) -> datetime:
        return self._now

    def set(self, at: datetime) -> None:
        self._now = _aware(at)

    def advance(self, delta: timedelta | float = 1.0) -> datetime:
        """Move forward by ``delta`` (a timedelta or seconds); returns the new time."""
        step = delta if isinstance(delta, timedelta) else timedelta(seconds=delta)
        self._now += step
        return self._now


def _aware(at: datetime) -> datetime:
    if at.tzinfo is None or at.utcoffset() is None:
        raise ValueError("FakeClock wants an aware datetime")
    return at.astimezone(UTC)


class FakeHasher:
    """Deterministic and fast; not a password hash, but never the password itself."""

    def hash(self, password: str) -> str:
        return "fake$" + hashlib.sha256(b"salt" + password.encode("utf-8")).hexdigest()

    def verify(self, password_hash: str, password: str) -> bool:
        return hmac.compare_digest(password_hash, self.hash(password))


class FakeBox:
    """Keyed sealing good enough for tests: XOR with a key stream plus an HMAC tag.

    ``open`` raises ``ValueError`` for tampered data or data sealed with another key,
    like the real box; ``digest`` is keyed, so two boxes digest differently.
    """

    _TAG = 32

    def __init__(self, key: bytes = b"test-key") -> None:
        self._key = key

    def _stream(self, size: int) -> bytes:
        blocks = (
            hashlib.sha256(self._key + i.to_bytes(8, "big")).digest()
            for i in range((size + 31) // 32)
        )
        return b"".join(blocks)[:size]

    def seal(self, plaintext: bytes) -> bytes:
        body = bytes(a ^ b for a, b in zip(plaintext, self._stream(len(plaintext)), strict=True))
        return hmac.new(self._key, body, "sha256").digest() + body

    def open(self, sealed: bytes) -> bytes:
        tag, body = sealed[: self._TAG], sealed[self._TAG :]
        if len(tag) != self._TAG or not hmac.compare_digest(
            tag, hmac.new(self._key, body, "sha256").digest()
        ):
            raise ValueError("sealed data was tampered with or sealed with another key")
        return bytes(a ^ b for a, b in zip(body, self._stream(len(body)), strict=True))

    def digest(self, data: bytes) -> str:
        return hmac.new(self._key, b"digest:" + data, "sha256").hexdigest()


#: What the fake resolver answers for a name it was not told of: a public address.
PUBLIC_ADDRESS = "93.184.215.14"


class FakeResolver:
    """A ``HostResolver`` that answers from ``answers`` (host → addresses; an empty list:
    the name does not resolve) and ``PUBLIC_ADDRESS`` for any other name; it records
    every question."""

    def __init__(self, answers: dict[str, list[str]] | None = None) -> None:
        self.answers = dict(answers or {})
        self.asked: list[tuple[str, int]] = []

    async def resolve(self, host: str, port: int) -> list[str]:
        self.asked.append((host, port))
        return list(self.answers.get(host, [PUBLIC_ADDRESS]))


class FakeSender:
    """A ``WebhookSender`` that answers each POST with the next of ``answers`` (204 once
    they run out) and records what was sent: ``(url, headers, body)``."""

    def __init__(self, answers: list[SendResult] | None = None) -> None:
        self.answers = list(answers or [])
        self.sent: list[tuple[str, dict[str, str], bytes]] = []

    async def send(
        self, url: str, headers: Mapping[str, str], body: bytes, seconds: float
    ) -> SendResult:
        self.sent.append((url, dict(headers), body))
        return self.answers.pop(0) if self.answers else SendResult(204)


class FakeKeys:
    """A KeyGenerator with recognisable, unique keys."""

    def __init__(self) -> None:
        self.count = 0

    def generate(self, comment: str) -> tuple[bytes, str]:
        self.count += 1
        return f"private-{self.count}".encode(), f"ssh-ed25519 AAAAfake{self.count} {comment}"


#: A valid SSH host public key: a server created with it is enrolled (not ``pending``).
HOST_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"
