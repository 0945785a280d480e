"""The ``berth`` command: ``serve``, ``user create``, ``token regenerate``.

Flags win over ``BERTH_*`` environment variables, which win over defaults.
The admin commands open the same data dir and work while ``serve`` runs.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import structlog
from berth.core.errors import Conflict, InvalidInput, NotFound

from ..bootstrap import Runtime, bootstrap
from ..logging import configure_logging
from ..settings import Settings, parse_listen

__all__ = ["main"]

log = structlog.get_logger()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="berth", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    def data_flag(p: argparse.ArgumentParser) -> None:
        p.add_argument("--data", type=Path, help="data directory (BERTH_DATA, default ./data)")

    serve = sub.add_parser("serve", help="run the API")
    data_flag(serve)
    serve.add_argument("--listen", help="HOST:PORT (BERTH_LISTEN, default 127.0.0.1:8080)")
    serve.add_argument("--base-url", help="public URL of this berth (BERTH_BASE_URL)")

    user = sub.add_parser("user", help="manage users").add_subparsers(dest="action", required=True)
    create = user.add_parser("create", help="create a user; the password is read from stdin")
    create.add_argument("--email", required=True)
    data_flag(create)

    token = sub.add_parser("token", help="manage API tokens").add_subparsers(
        dest="action", required=True
    )
    regen = token.add_parser(
        "regenerate", help="print a new API token for the user; the old one stops working"
    )
    regen.add_argument("--email", required=True)
    data_flag(regen)
    return parser


def _settings(args: argparse.Namespace) -> Settings:
    settings = Settings.from_env()
    if getattr(args, "data", None) is not None:
        settings = replace(settings, data_dir=args.data)
    if getattr(args, "listen", None):
        host, port = parse_listen(args.listen)
        settings = replace(settings, listen_host=host, listen_port=port)
    if getattr(args, "base_url", None):
        settings = replace(settings, base_url=args.base_url)
    return settings


async def _serve(settings: Settings) -> None:
    import uvicorn

    from ..http import create_app

    runtime = await bootstrap(settings)
    app = create_app(runtime.services, settings, on_shutdown=[runtime.close])
    config = uvicorn.Config(
        app,
        host=settings.listen_host,
        port=settings.listen_port,
        log_config=None,
        access_log=False,
        server_header=False,
        lifespan="on",
        timeout_graceful_shutdown=10,
    )
    log.info(
        "serve_started",
        listen=f"http://{settings.listen_host}:{settings.listen_port}",
        data_dir=str(settings.data_dir),
    )
    await uvicorn.Server(config).serve()


async def _with_runtime(settings: Settings, args: argparse.Namespace) -> int:
    runtime: Runtime = await bootstrap(settings)
    try:
        services = runtime.services
        if args.command == "user":
            password = sys.stdin.readline().rstrip("\r\n")
            user = await services.create_user(args.email, password)
            print(user.id)
        else:
            print(await services.regenerate_token(email=args.email))
        return 0
    finally:
        await runtime.close()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the process exit code."""
    args = _parser().parse_args(argv)
    settings = _settings(args)
    configure_logging(
        settings.log_format, settings.log_level if args.command == "serve" else "warning"
    )
    if args.command == "serve":
        asyncio.run(_serve(settings))
        return 0
    try:
        return asyncio.run(_with_runtime(settings, args))
    except InvalidInput as exc:
        for err in exc.errors:
            print(f"berth: {err.location}: {err.message}", file=sys.stderr)
        return 2
    except (Conflict, NotFound) as exc:
        print(f"berth: {exc.detail}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
