"""``RateLimiter`` in this process's memory (SQLite, tests); PostgreSQL's is
``berth.adapters.sql.limits.SqlRateLimiter``, shared by every replica."""

from .memory import MemoryRateLimiter

__all__ = ["MemoryRateLimiter"]
