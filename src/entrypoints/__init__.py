"""Entrypoints: the HTTP app, the CLI and the worker, wired by ``bootstrap``."""

__all__: list[str] = []
