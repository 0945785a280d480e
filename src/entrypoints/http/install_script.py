"""The install script served at ``GET /api/deploy``.

A placeholder until the enrollment flow lands: it says so and changes nothing.
The base URL is passed through ``shlex.quote``; the script embeds no secret.
"""

from __future__ import annotations

import shlex

__all__ = ["render_install_script"]

_TEMPLATE = """#!/bin/sh
# berth install script — brings this server under management by {base_url}.
# Usage: curl -fsSL {base_url}/api/deploy | sudo sh -s -- --token <enrollment token>
# This version only checks its arguments; enrollment arrives in a later release.
set -eu
BERTH_URL={quoted}
TOKEN=""
while [ $# -gt 0 ]; do
  case "$1" in
    --token) TOKEN="${{2:-}}"; shift 2 || shift ;;
    --dry-run) shift ;;
    *) echo "berth: unknown option: $1" >&2; exit 2 ;;
  esac
done
if [ -z "$TOKEN" ]; then
  echo "berth: --token <enrollment token> is required" >&2
  exit 2
fi
echo "berth: automatic enrollment with $BERTH_URL is not available in this version." >&2
exit 1
"""


def render_install_script(base_url: str) -> str:
    """The script text for a control plane at ``base_url``."""
    return _TEMPLATE.format(base_url=base_url, quoted=shlex.quote(base_url))
