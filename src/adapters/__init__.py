"""Adapters: one package per dependency, each implementing ports of ``berth.core``."""

__all__: list[str] = []
