"""The client commands' arguments: ``berth servers``, ``deploy``, ``logs``, ... (see
``remote.py``, which runs them)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from berth.client import DEFAULT_URL

__all__ = ["COMMANDS", "add_client_parsers"]

COMMANDS = frozenset(
    {
        "servers",
        "installations",
        "containers",
        "deploy",
        "deployment",
        "logs",
        "rollback",
        "cancel",
        "revisions",
        "stop",
        "start",
        "restart",
        "remove",
        "stats",
        "disk",
        "registries",
        "git-credentials",
        "deploy-hook",
        "webhooks",
        "teams",
        "members",
        "invitations",
        "tokens",
        "audit",
    }
)


def add_client_parsers(parser: argparse.ArgumentParser, sub: Any) -> None:
    """Add the client commands to ``berth``'s subparsers, and their options."""
    # The options go on the top level and on each command, so both
    # `berth --url U servers` and `berth servers --url U` work; SUPPRESS keeps a
    # command's absent option from hiding the top level's.
    for target, default in (
        (parser, None),
        (common := argparse.ArgumentParser(add_help=False), argparse.SUPPRESS),
    ):
        target.add_argument(
            "--url",
            default=default,
            help=f"berth to talk to, client commands (BERTH_URL, default {DEFAULT_URL})",
        )
        target.add_argument(
            "--token",
            default=default,
            help="API token, client commands (BERTH_TOKEN: preferred, argv is visible to others)",
        )
        target.add_argument(
            "--json",
            action="store_true",
            default=False if default is None else default,
            help="print the API's JSON as received (client commands)",
        )

    def client(name: str, help_text: str) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = sub.add_parser(name, help=help_text, parents=[common])
        return p

    servers = client(
        "servers",
        "list your servers; `servers add NAME` registers one and prints its install command; "
        "`servers remove ID` forgets one (its containers run on); `servers edit ID [--name N] "
        "[--address A] [--ssh-port P]` changes one in place (`servers rename ID NAME` its "
        "name); `servers repin ID --fingerprint SHA256:… --key-file F` accepts the new SSH "
        "host key a server offered; `servers install-command ID` prints a new install command "
        "for a pending server (its previous one stops working)",
    )
    servers.add_argument(
        "action",
        nargs="?",
        choices=("list", "add", "remove", "edit", "rename", "repin", "install-command"),
        default="list",
        help="default: list",
    )
    servers.add_argument(
        "server",
        nargs="?",
        metavar="SERVER_ID",
        help="remove, edit, rename, repin, install-command: the server; add: the new server's name",
    )
    servers.add_argument("new_name", nargs="?", metavar="NAME", help="rename: the new name")
    servers.add_argument("--name", help="edit: a new display name")
    servers.add_argument(
        "--address",
        metavar="HOST",
        help="add: where berth reaches it over SSH (default: learned when it enrolls); "
        "edit: a new address (checked at once)",
    )
    servers.add_argument(
        "--ssh-port",
        type=int,
        metavar="PORT",
        help="add: default 22; edit: a new SSH port (checked at once)",
    )
    servers.add_argument(
        "--fingerprint",
        metavar="SHA256:…",
        help="repin: the offered key's fingerprint, as `ssh-keygen -lf` prints it on the server",
    )
    servers.add_argument(
        "--key",
        action="append",
        default=[],
        metavar="LINE",
        help="add, repin: a host public key line (`ssh-ed25519 AAAA…`); repeat it",
    )
    servers.add_argument(
        "--key-file",
        action="append",
        default=[],
        type=Path,
        metavar="FILE",
        help="add, repin: a file of host public key lines (e.g. a copy of "
        "ssh_host_ed25519_key.pub)",
    )
    installations = client("installations", "list the installations on a server")
    installations.add_argument("--server", required=True, metavar="ID")
    installations.add_argument(
        "--all", action="store_true", help="removed installations too (their history is kept)"
    )
    client("containers", "list every container on a server").add_argument(
        "--server", required=True, metavar="ID"
    )
    deploy = client("deploy", "deploy (or redeploy) a Docker application on a server")
    deploy.add_argument("--server", required=True, metavar="ID")
    deploy.add_argument("--name", required=True)
    source = deploy.add_mutually_exclusive_group(required=True)
    source.add_argument("--image", help="REPOSITORY:TAG[@sha256:DIGEST]")
    source.add_argument(
        "--build",
        type=Path,
        metavar="DIR",
        help="upload DIR (less what its .dockerignore excludes) and build it on the server; "
        "follows the build unless --wait is given",
    )
    source.add_argument("--git", metavar="URL", help="build this Git repository on the server")
    deploy.add_argument("--ref", help="with --git: a branch, tag or commit (default: its HEAD)")
    deploy.add_argument("--context", help="with --build/--git: the subdirectory to build")
    deploy.add_argument("--dockerfile", help="with --build/--git: its path in the context")
    deploy.add_argument(
        "--build-arg",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="with --build/--git: a build argument; repeat it",
    )
    deploy.add_argument("--target", help="with --build/--git: the multi-stage target")
    deploy.add_argument("--port", type=int, help="container port (default 3000)")
    deploy.add_argument("--domain")
    deploy.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an environment variable, split at the first '='; repeat it",
    )
    deploy.add_argument(
        "--env-file",
        type=Path,
        metavar="FILE",
        help="KEY=VALUE lines, no quoting; '#' comments and blank lines skipped; --env wins",
    )
    deploy.add_argument(
        "--volume",
        action="append",
        default=[],
        metavar="SPEC",
        help="HOST_PATH:CONTAINER_PATH[:ro|:rw]; repeat it",
    )
    deploy.add_argument(
        "--wait",
        type=int,
        metavar="SECONDS",
        help="wait up to 1-300 s for the result: exit 0 succeeded, 1 failed, 3 still running",
    )
    deploy.add_argument(
        "--follow",
        action="store_true",
        help="print each step as it happens until the end: exit 0 succeeded, 1 otherwise",
    )
    deploy.add_argument("--memory", help="memory limit: bytes, or e.g. 512m, 2g")
    deploy.add_argument("--cpus", type=float, help="CPU limit, e.g. 0.5")
    deploy.add_argument(
        "--restart", choices=("unless-stopped", "always", "on-failure", "no"), help="restart policy"
    )
    deploy.add_argument(
        "--health-path", metavar="PATH", help="HTTP path that must answer 2xx/3xx, e.g. /healthz"
    )
    deploy.add_argument(
        "--host-port",
        type=int,
        metavar="PORT",
        help="without --domain: the host port publishing --port (default: --port itself)",
    )
    deploy.add_argument(
        "--stop-grace",
        type=int,
        metavar="SECONDS",
        help="seconds a stop waits after SIGTERM before killing the app, 0-600 (default 10)",
    )
    deploy.add_argument(
        "--command",
        action="append",
        dest="argv",  # ``command`` is the subcommand's name
        metavar="ARG",
        help="the container's command, one argv word each (no shell); repeat it in order",
    )
    deployment = client("deployment", "show a deployment: state, step, error, events")
    deployment.add_argument("id")
    deployment.add_argument(
        "--follow",
        action="store_true",
        help="print its steps (past, then live) until it ends: exit 0 succeeded, 1 otherwise",
    )
    rollback = client("rollback", "deploy an earlier succeeded revision of an installation again")
    rollback.add_argument("installation_id", metavar="INSTALLATION_ID")
    rollback.add_argument(
        "--to", metavar="DEPLOYMENT_ID", help="that revision (default: the one before the current)"
    )
    rollback.add_argument("--wait", type=int, metavar="SECONDS", help="as for deploy")
    cancel = client("cancel", "cancel a queued or running deployment")
    cancel.add_argument("id", metavar="DEPLOYMENT_ID")
    cancel.add_argument("--wait", type=int, metavar="SECONDS", help="wait 1-300 s for the end")
    revisions = client("revisions", "an installation's deployments, newest first")
    revisions.add_argument("installation_id", metavar="INSTALLATION_ID")
    revisions.add_argument("--limit", type=int, metavar="N", help="1-100 (default 20)")
    revisions.add_argument("--before", metavar="DEPLOYMENT_ID", help="the next page after this id")
    for action, text in (
        ("stop", "stop an installation's container (kept; status stopped)"),
        ("start", "start an installation's container again"),
        ("restart", "restart an installation's container"),
        ("remove", "remove an installation: its container and route go, its history stays"),
    ):
        client(action, text).add_argument("installation_id", metavar="INSTALLATION_ID")
    stats = client("stats", "CPU and memory of an installation's container, sampled now")
    stats.add_argument("installation_id", metavar="INSTALLATION_ID")
    disk = client("disk", "what Docker keeps on a server's disk (images, containers, volumes)")
    disk.add_argument("server_id", metavar="SERVER_ID")
    for name, about, host_help, variable in (
        (
            "registries",
            "private registries: credentials your deploys pull with",
            "hostname[:port], as in an image reference",
            "BERTH_REGISTRY_PASSWORD",
        ),
        (
            "git-credentials",
            "private Git repositories: credentials your builds fetch with",
            "hostname[:port], as the repository URL names it",
            "BERTH_GIT_PASSWORD",
        ),
    ):
        actions = client(name, about).add_subparsers(dest="action", required=True)
        actions.add_parser(
            "list", help="your team's saved hosts (never a password)", parents=[common]
        )
        add = actions.add_parser(
            "add",
            help="save credentials for a host; the password (or token) is read from stdin "
            f"(--password-stdin), {variable}, or a prompt -- never from argv",
            parents=[common],
        )
        add.add_argument("host", metavar="HOST", help=host_help)
        add.add_argument("--username", "-u", required=True)
        add.add_argument(
            "--password-stdin",
            action="store_true",
            help="read the password (or token) from the first line of stdin",
        )
        remove = actions.add_parser(
            "remove", help="forget a host's credentials (by id or host)", parents=[common]
        )
        remove.add_argument("credential", metavar="ID_OR_HOST")
    hook = client(
        "deploy-hook",
        "push to deploy: `deploy-hook create ID` prints the URL and secret (shown once; run "
        "again to rotate it) to add as the repository's webhook; `show`, `remove`",
    )
    actions = hook.add_subparsers(dest="action", required=True)
    for action, text in (
        ("create", "make the app's hook, or give it a new secret: prints its URL and secret"),
        ("show", "the app's hook URL (never its secret)"),
        ("remove", "remove the app's hook: its URL deploys nothing from then on"),
    ):
        actions.add_parser(action, help=text, parents=[common]).add_argument(
            "installation_id", metavar="INSTALLATION_ID"
        )
    webhooks = client("webhooks", "your webhooks: list, add, remove, test, read the delivery log")
    actions = webhooks.add_subparsers(dest="webhooks_action", required=True, metavar="ACTION")
    actions.add_parser("list", help="list your webhooks", parents=[common])
    add = actions.add_parser(
        "add", help="add a webhook; prints its signing secret, once", parents=[common]
    )
    add.add_argument("webhook_url", metavar="URL", help="http(s) URL berth POSTs events to")
    add.add_argument(
        "--event",
        action="append",
        required=True,
        dest="events",
        metavar="EVENT",
        help="deployment.succeeded, deployment.failed, deployment.canceled, server.offline "
        "or server.online; repeat it",
    )
    add.add_argument(
        "--format",
        choices=("standard", "slack", "discord"),
        default="standard",
        help="standard (signed JSON, default), slack ({text}) or discord ({content}): the "
        "events in words with a link to the app",
    )
    actions.add_parser("remove", help="delete a webhook", parents=[common]).add_argument(
        "webhook_id", metavar="WEBHOOK_ID"
    )
    actions.add_parser(
        "test",
        help="send a webhook a test event now; exits 1 unless its endpoint answered 2xx",
        parents=[common],
    ).add_argument("webhook_id", metavar="WEBHOOK_ID")
    deliveries = actions.add_parser(
        "deliveries", help="a webhook's deliveries and their attempts", parents=[common]
    )
    deliveries.add_argument("webhook_id", metavar="WEBHOOK_ID")
    deliveries.add_argument("--limit", type=int, metavar="N", help="1-100 (default 50)")
    _add_team_parsers(client, common)
    logs = client("logs", "print the last log lines of an installation's container")
    logs.add_argument("installation_id", metavar="INSTALLATION_ID")
    logs.add_argument("--tail", type=int, metavar="N", help="1-5000 lines (default 100)")
    logs.add_argument(
        "--follow",
        action="store_true",
        help="then print new lines as the app writes them, until its container stops",
    )


def _add_team_parsers(client: Any, common: argparse.ArgumentParser) -> None:
    """``teams``, ``members``, ``invitations``, ``tokens`` and ``audit``. Roles and scopes
    are not checked here: berth judges them and names what is wrong."""

    def action(parent: Any, name: str, help_text: str, **more: Any) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = parent.add_parser(
            name, help=help_text, parents=[common], **more
        )
        return p

    teams = client("teams", "your teams and your role in each; create one")
    actions = teams.add_subparsers(dest="teams_action", required=True, metavar="ACTION")
    action(actions, "list", "your teams (your personal one first), with your role")
    action(actions, "create", "a new team, you its owner").add_argument("name", metavar="NAME")

    members = client("members", "a team's members: list, invite, change a role, remove")
    actions = members.add_subparsers(dest="members_action", required=True, metavar="ACTION")
    action(actions, "list", "a team's members and their roles").add_argument(
        "team", metavar="TEAM_ID"
    )
    invite = action(actions, "invite", "a one-time invitation (7 days); prints its link, once")
    invite.add_argument("team", metavar="TEAM_ID")
    invite.add_argument("email", metavar="EMAIL")
    invite.add_argument(
        "--role", required=True, metavar="ROLE", help="owner, admin, deployer or viewer"
    )
    set_role = action(actions, "set-role", "give a member another role")
    set_role.add_argument("team", metavar="TEAM_ID")
    set_role.add_argument("user", metavar="USER_ID")
    set_role.add_argument("role", metavar="ROLE", help="owner, admin, deployer or viewer")
    remove = action(actions, "remove", "take a member out (their tokens for it stop at once)")
    remove.add_argument("team", metavar="TEAM_ID")
    remove.add_argument("user", metavar="USER_ID")

    invitations = client("invitations", "invitations made for you")
    actions = invitations.add_subparsers(dest="invitations_action", required=True, metavar="ACTION")
    action(actions, "accept", "join the team of an invitation made for your email").add_argument(
        "invitation", metavar="TOKEN", help="the invitation's token (or its link)"
    )

    tokens = client("tokens", "your named API tokens: list, create, revoke, the current one")
    actions = tokens.add_subparsers(dest="tokens_action", required=True, metavar="ACTION")
    action(actions, "list", "your named tokens (never a secret)")
    create = action(actions, "create", "a named token for one team; prints its secret, once")
    create.add_argument("name", metavar="NAME")
    create.add_argument(
        "--scope",
        action="append",
        required=True,
        dest="scopes",
        metavar="SCOPE",
        help="read, deploy (and read) or admin (and deploy); repeat it",
    )
    create.add_argument("--team", metavar="TEAM_ID", help="default: the calling token's team")
    create.add_argument(
        "--server",
        action="append",
        dest="servers",
        metavar="SERVER_ID",
        help="only this server (the others are not found); repeat it",
    )
    create.add_argument(
        "--expires", metavar="AT", help="when it stops working: RFC 3339, e.g. 2027-01-31T00:00:00Z"
    )
    action(actions, "revoke", "revoke a named token: it is refused at once").add_argument(
        "token_id", metavar="TOKEN_ID"
    )
    action(
        actions,
        "current",
        "who the calling token is: user, team, role, scopes, servers",
        aliases=["whoami"],
    )

    audit = client("audit", "a team's audit log, newest first (admin or owner)")
    audit.add_argument("--team", metavar="TEAM_ID", help="default: the calling token's team")
    audit.add_argument("--limit", type=int, metavar="N", help="1-200 (default 50)")
    audit.add_argument("--before", metavar="EVENT_ID", help="the next page after this id")
