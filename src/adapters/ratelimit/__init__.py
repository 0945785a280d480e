"""``RateLimiter`` adapters: in memory (per process), or in PostgreSQL (shared by replicas)."""

from .memory import MemoryRateLimiter

__all__ = ["MemoryRateLimiter", "build_rate_limiter"]


def build_rate_limiter(engine: object) -> MemoryRateLimiter:
    """The limiter for berth's store: in memory for now (per process)."""
    return MemoryRateLimiter()
