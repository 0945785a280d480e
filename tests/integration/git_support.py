"""A Git repository served over HTTP from a directory on 127.0.0.1, for builds from Git
(``test_builds.py``, the dashboard's, push to deploy, the build benchmark): git's "dumb
HTTP" (static files) by default, or its "smart HTTP" (``git http-backend``, as Git hosts
serve it) with ``SmartHandler``."""

from __future__ import annotations

import functools
import http.server
import os
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

__all__ = ["GitRepo", "QuietHandler", "SmartHandler", "served_repo"]


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
def served_repo(
    where: Path, handler: type[http.server.SimpleHTTPRequestHandler] | None = None
) -> Iterator[GitRepo]:
    """An empty repository (branch ``main``) under ``where``, served by ``handler`` (the
    directory of bare repositories its ``directory``; dumb HTTP by default) at
    ``http://127.0.0.1:<port>/app.git`` until the block ends."""
    served = where / "served"
    served.mkdir()
    subprocess.run(
        ["git", "init", "-q", "--bare", "-b", "main", str(served / "app.git")], check=True
    )
    work = where / "work"
    subprocess.run(["git", "init", "-q", "-b", "main", str(work)], check=True)
    serving = functools.partial(handler or QuietHandler, directory=str(served))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), serving)
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


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    """Dumb HTTP: the repositories' files as they are, no log lines."""

    def log_message(self, format: str, *args: object) -> None:
        pass


class SmartHandler(QuietHandler):
    """Smart HTTP: each request answered by ``git http-backend`` (a CGI program), so a
    fetch is one exchange of packs and may be shallow, as with a Git host."""

    def do_GET(self) -> None:
        self._backend()

    def do_POST(self) -> None:
        self._backend()

    def _backend(self) -> None:
        path, _, query = self.path.partition("?")
        length = int(self.headers.get("Content-Length") or 0)
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "GIT_PROJECT_ROOT": self.directory,
            "GIT_HTTP_EXPORT_ALL": "1",
            "REQUEST_METHOD": self.command,
            "PATH_INFO": path,
            "QUERY_STRING": query,
            "CONTENT_TYPE": self.headers.get("Content-Type") or "",
            "CONTENT_LENGTH": str(length),
            "REMOTE_ADDR": self.client_address[0],
            "HTTP_CONTENT_ENCODING": self.headers.get("Content-Encoding") or "",
            "GIT_PROTOCOL": self.headers.get("Git-Protocol") or "",
        }
        body = self.rfile.read(length) if length else b""
        done = subprocess.run(
            ["git", "http-backend"], input=body, env=env, capture_output=True, check=False
        )
        head, _, payload = done.stdout.partition(b"\r\n\r\n")
        status, headers = 200, []
        for line in head.decode("latin-1").split("\r\n"):
            name, _, value = line.partition(":")
            if name.lower() == "status":
                status = int(value.split()[0])
            elif name:
                headers.append((name, value.strip()))
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)
