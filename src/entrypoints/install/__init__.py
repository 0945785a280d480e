"""The server install script (``install.sh``), served at ``GET /api/deploy``."""

from .script import install_command, loopback, plain_http, render_install_script

__all__ = ["install_command", "loopback", "plain_http", "render_install_script"]
