"""The ``berth`` command: ``serve``, ``worker``, ``user create``, ``user invite``,
``token regenerate``, ``backup``, ``restore``; and the API client commands (see
``remote.py``) and ``mcp``, which use ``berth.client``.

Flags win over ``BERTH_*`` environment variables, which win over defaults.
The admin commands open the same data dir and work while ``serve`` runs; the
client commands talk to a running berth over HTTP with an API token.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from collections.abc import Coroutine, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import structlog
import uvloop
from berth.core.commands import CreateInvite, CreateUser, IssueSetupCode, ResetToken
from berth.core.errors import Conflict, InvalidInput, NotFound

from ..bootstrap import Runtime, bootstrap
from ..logging import configure_logging
from ..settings import Settings, known_base_url, parse_listen, record_served_url, served_url
from . import remote

__all__ = ["main"]

log = structlog.get_logger()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="berth",
        description="Self-hosted server management: run berth (serve, worker), manage its "
        "users and tokens, or use a running berth's API (servers, deploy, logs, ...).",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    def data_flag(p: argparse.ArgumentParser) -> None:
        p.add_argument("--data", type=Path, help="data directory (BERTH_DATA, default ./data)")

    serve = sub.add_parser("serve", help="run the API")
    data_flag(serve)
    serve.add_argument("--listen", help="HOST:PORT (BERTH_LISTEN, default 127.0.0.1:8080)")
    serve.add_argument("--base-url", help="public URL of this berth (BERTH_BASE_URL)")
    serve.add_argument(
        "--local",
        action="store_true",
        help="manage this machine too, as a server of the first user or of BERTH_LOCAL_OWNER "
        "(BERTH_LOCAL=1); its owner is trusted like the operator",
    )
    serve.add_argument(
        "--no-worker", action="store_true", help="serve the API only; deployments run elsewhere"
    )

    worker = sub.add_parser("worker", help="run deployments and watch servers, without the API")
    data_flag(worker)
    worker.add_argument("--local", action="store_true", help="as for serve")
    worker.add_argument(
        "--metrics-listen",
        metavar="HOST:PORT",
        help="serve GET /metrics (this worker's step durations and takeovers) there "
        "(BERTH_METRICS_LISTEN; protected as serve's: BERTH_METRICS_TOKEN or loopback)",
    )

    user = sub.add_parser("user", help="manage users").add_subparsers(dest="action", required=True)
    create = user.add_parser("create", help="create a user; the password is read from stdin")
    create.add_argument("--email", required=True)
    data_flag(create)
    invite = user.add_parser(
        "invite", help="print a one-time sign-up link (valid 7 days) for the dashboard"
    )
    invite.add_argument("--email", help="only this address may use it")
    invite.add_argument("--base-url", help="public URL of this berth (BERTH_BASE_URL)")
    data_flag(invite)

    token = sub.add_parser("token", help="manage API tokens").add_subparsers(
        dest="action", required=True
    )
    regen = token.add_parser(
        "regenerate", help="print a new API token for the user; the old one stops working"
    )
    regen.add_argument("--email", required=True)
    data_flag(regen)

    backup = sub.add_parser(
        "backup",
        help="copy the store (SQLite) to FILE, consistent while berth runs; the secret key "
        "is not in it",
    )
    backup.add_argument("file", type=Path, metavar="FILE", help="a new file")
    data_flag(backup)
    restore = sub.add_parser(
        "restore", help="make FILE (a berth backup) the store of a new data dir"
    )
    restore.add_argument("file", type=Path, metavar="FILE")
    data_flag(restore)
    restore.add_argument(
        "--secret-key-file",
        type=Path,
        metavar="PATH",
        help="the secret.key of the data dir the backup was taken from (copied into the "
        "new one); not needed with BERTH_SECRET_KEY",
    )
    restore.add_argument(
        "--force", action="store_true", help="replace the store the data dir holds (stop berth)"
    )

    remote.add_client_parsers(parser, sub)
    mcp = sub.add_parser(
        "mcp", help="serve berth's MCP tools on stdio (for AI agents), backed by BERTH_URL's API"
    )
    mcp.add_argument("--url", default=argparse.SUPPRESS, help="as for the client commands")
    mcp.add_argument("--token", default=argparse.SUPPRESS, help="as for the client commands")
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
    if getattr(args, "local", False):
        settings = replace(settings, local=True)
    if getattr(args, "metrics_listen", None):
        settings = replace(settings, metrics_listen=parse_listen(args.metrics_listen))
    if getattr(args, "no_worker", False):
        settings = replace(settings, worker=False)
    return settings


#: Seconds berth keeps an idle HTTP connection open (uvicorn's default: 5).
KEEP_ALIVE_SECONDS = 75


async def _serve(settings: Settings) -> None:
    import uvicorn

    from ..http import create_app
    from ..http.forwarded import behind_proxies

    # --no-worker: no worker and no monitor, so this process never connects to a server
    # on its own (a user's request for an app's logs, say, still does).
    runtime = await bootstrap(settings, background=settings.worker)
    background = runtime.background
    code = await runtime.bus.handle(IssueSetupCode())
    record_served_url(settings)
    print(_start_line(settings, code), file=sys.stderr, flush=True)

    async def start_background() -> None:
        if background is not None:
            await background.start()

    app = create_app(
        runtime.bus,
        settings,
        limiter=runtime.limiter,
        on_startup=[start_background],
        on_shutdown=[runtime.close],
        metrics=runtime.metrics,
        csrf_secret=runtime.csrf_secret,
    )
    config = uvicorn.Config(
        # X-Forwarded-For believed from BERTH_TRUSTED_PROXIES only (uvicorn's own default
        # believes 127.0.0.1: anyone on this machine could then pose as any address to
        # the per-address throttles), and warned about from anyone else.
        behind_proxies(app, settings.trusted_proxies),
        host=settings.listen_host,
        port=settings.listen_port,
        log_config=None,
        access_log=False,
        server_header=False,
        proxy_headers=False,
        lifespan="on",
        timeout_graceful_shutdown=10,
        # An idle keep-alive connection is closed by its client, not by berth: closed at
        # the moment a client sends its next request on it, that request is lost (the
        # client sees the connection drop, no answer). Longer than clients (httpx: 5 s)
        # and proxies in front (nginx, load balancers: 60 s) keep one idle.
        timeout_keep_alive=KEEP_ALIVE_SECONDS,
    )
    log.info(
        "serve_started",
        listen=f"http://{settings.listen_host}:{settings.listen_port}",
        data_dir=str(settings.data_dir),
        trusted_proxies=settings.trusted_proxies,
    )
    # uvicorn shuts down gracefully on SIGTERM, then re-raises the signal under the
    # handler that was in place before it started. SIGTERM is how serve is meant to be
    # stopped, so that re-raise must not kill the process: exit code 0 after a clean stop.
    signal.signal(signal.SIGTERM, lambda _sig, _frame: None)
    await uvicorn.Server(config).serve()


def _start_line(settings: Settings, code: str | None) -> str:
    """The one human line ``serve`` prints as it starts: where to open it, and on a fresh
    berth the first step, the one-time link to the first account."""
    base = served_url(settings)
    if code is None:
        return f"berth: open {base}/ in a browser and sign in."
    machine = " and this machine" if settings.local else ""
    return (
        f"berth: open {base}/signup?invite={code} in a browser and create your account "
        f"(it owns this berth{machine}; one-time setup code {code}, valid 24 hours; a "
        "restart prints a new one)."
    )


async def _work(settings: Settings) -> None:
    """``berth worker``: the background loops alone, until SIGTERM or SIGINT."""
    import signal

    runtime = await bootstrap(settings, background=True)
    assert runtime.background is not None
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await runtime.background.start()
    log.info("worker_started", data_dir=str(settings.data_dir))
    metrics_server = None
    if settings.metrics_listen is not None and runtime.metrics is not None:
        import uvicorn

        from ..http import create_metrics_app

        host, port = settings.metrics_listen
        metrics_server = uvicorn.Server(
            uvicorn.Config(
                create_metrics_app(runtime.bus, settings, runtime.metrics),
                host=host,
                port=port,
                log_config=None,
                access_log=False,
                server_header=False,
                lifespan="off",
            )
        )
        # uvicorn takes SIGTERM/SIGINT while it serves and raises them again once it
        # has stopped, which then reaches the handlers above.
        serving = asyncio.create_task(metrics_server.serve(), name="berth-worker-metrics")
        log.info("worker_metrics_listening", listen=f"http://{host}:{port}/metrics")
    try:
        await stop.wait()
    finally:
        if metrics_server is not None:
            metrics_server.should_exit = True
            await asyncio.gather(serving, return_exceptions=True)
        await runtime.close()


async def _backup(settings: Settings, args: argparse.Namespace) -> int:
    """``berth backup FILE``: no bootstrap (no migration): the store as it is."""
    from ..bootstrap import back_up_store

    info = await back_up_store(settings, args.file)
    print(f"{args.file}: schema {info.schema_version}, {info.users} user(s).")
    key = (
        "BERTH_SECRET_KEY"
        if settings.secret_key
        else str((settings.data_dir / "secret.key").absolute())
    )
    print(
        f"berth: the backup holds env values and SSH keys sealed with {key}, which it "
        "does not contain: keep that key safe, apart from it; restore needs it.",
        file=sys.stderr,
    )
    return 0


async def _restore(settings: Settings, args: argparse.Namespace) -> int:
    from ..bootstrap import restore_store

    info, installed = await restore_store(
        settings, args.file, key_file=args.secret_key_file, force=args.force
    )
    print(
        f"Restored {args.file} (schema {info.schema_version}, {info.users} user(s)) into "
        f"{settings.data_dir}." + (" Installed its secret key." if installed else "")
    )
    return 0


async def _with_runtime(settings: Settings, args: argparse.Namespace) -> int:
    runtime: Runtime = await bootstrap(settings)
    try:
        bus = runtime.bus
        if args.command == "user" and args.action == "invite":
            token = await bus.handle(CreateInvite(email=args.email))
            print(f"{known_base_url(settings)}/signup?invite={token}")
        elif args.command == "user":
            password = sys.stdin.readline().rstrip("\r\n")
            user = await bus.handle(CreateUser(email=args.email, password=password))
            print(user.id)
        else:
            print(await bus.handle(ResetToken(email=args.email)))
        return 0
    finally:
        await runtime.close()


def _mcp(args: argparse.Namespace) -> int:
    """``berth mcp``: the MCP tools on stdio until the client hangs up (stdout is theirs)."""
    import os

    from ..mcp.stdio import run_stdio

    try:
        url, token = remote.credentials(args, os.environ)
    except remote.UsageError as exc:
        print(f"berth: {exc}", file=sys.stderr)
        return remote.EXIT_USAGE
    asyncio.run(run_stdio(url, token))
    return 0


def _run_long(main: Coroutine[Any, Any, None]) -> None:
    """Run a long-lived process (serve, worker) on uvloop: a quarter less CPU per API
    request than asyncio's own loop here (``api_bench``; uvicorn picks it the same way
    when it makes the loop itself)."""
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(main)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the process exit code."""
    args = _parser().parse_args(argv)
    if args.command in remote.COMMANDS:
        return remote.run(args)
    if args.command == "mcp":
        return _mcp(args)
    settings = _settings(args)
    configure_logging(
        settings.log_format,
        settings.log_level if args.command in ("serve", "worker") else "warning",
    )
    if args.command == "serve":
        _run_long(_serve(settings))
        return 0
    if args.command == "worker":
        _run_long(_work(settings))
        return 0
    run = {"backup": _backup, "restore": _restore}.get(args.command, _with_runtime)
    try:
        return asyncio.run(run(settings, args))
    except InvalidInput as exc:
        for err in exc.errors:
            print(f"berth: {err.location}: {err.message}", file=sys.stderr)
        return 2
    except (Conflict, NotFound) as exc:
        print(f"berth: {exc.detail}", file=sys.stderr)
        return 1
    except OSError as exc:  # backup/restore: a file berth may not read or write
        if args.command not in ("backup", "restore"):
            raise
        print(f"berth: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
