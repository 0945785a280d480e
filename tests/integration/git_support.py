"""A Git repository served over git's "dumb HTTP" from a directory on 127.0.0.1, for
builds from Git (``test_builds.py``, the dashboard's, the build benchmark)."""

from __future__ import annotations

import functools
import http.server
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

__all__ = ["GitRepo", "served_repo"]


@dataclass
class GitRepo:
    """A repository whose commits are pushed to a bare one served over dumb HTTP."""

    work: Path
    url: str

    def git(self, *args: str, cwd: Path | None = None) -> str:
        who = ["-c", "user.name=berth test", "-c", "user.email=test@example.com"]
        done = subprocess.run(
            ["git", *who, *args], cwd=cwd or self.work, check=True, capture_output=True, text=True
        )
        return done.stdout.strip()

    def commit(self, files: dict[str, str], message: str) -> str:
        """Commit ``files``, push to the served repository; the new commit's id."""
        for name, text in files.items():
            path = self.work / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        self.git("add", "-A")
        self.git("commit", "-q", "-m", message)
        self.git("push", "-q", "origin", "HEAD:main")
        self.git("update-server-info", cwd=self.work.parent / "served" / "app.git")
        return self.git("rev-parse", "HEAD")


@contextmanager
def served_repo(where: Path) -> Iterator[GitRepo]:
    """An empty repository (branch ``main``) under ``where``, served at
    ``http://127.0.0.1:<port>/app.git`` until the block ends."""
    served = where / "served"
    served.mkdir()
    subprocess.run(
        ["git", "init", "-q", "--bare", "-b", "main", str(served / "app.git")], check=True
    )
    work = where / "work"
    subprocess.run(["git", "init", "-q", "-b", "main", str(work)], check=True)
    handler = functools.partial(_QuietHandler, directory=str(served))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/app.git"
        made = GitRepo(work, url)
        made.git("remote", "add", "origin", str(served / "app.git"))
        yield made
    finally:
        server.shutdown()
        server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass
