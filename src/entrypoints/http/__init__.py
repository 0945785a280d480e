"""The HTTP entrypoint: a Litestar app over the core's use cases."""

from .app import create_app, create_metrics_app

__all__ = ["create_app", "create_metrics_app"]
