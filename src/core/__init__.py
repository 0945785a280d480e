"""berth's core: domain types, rules, use cases and ports. No I/O imports here."""

from . import commands, errors, models, ports, tokens, types, use_cases

__all__ = ["commands", "errors", "models", "ports", "tokens", "types", "use_cases"]
