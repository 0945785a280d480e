"""A build context from a directory, as ``docker build`` makes one: every file, less what
``.dockerignore`` excludes, packed into a tar archive on disk (never in memory).

``.dockerignore`` is read as Docker reads it: one pattern a line, ``#`` comments and blank
lines skipped, each pattern cleaned (``./`` and a leading ``/`` dropped), ``*`` and ``?``
within a path segment, ``**`` across segments, a pattern that matches a directory
excluding what is under it, and ``!`` making an exception; the last pattern that matches
decides. The Dockerfile and ``.dockerignore`` themselves are always sent (as Docker does).
"""

from __future__ import annotations

import os
import re
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path

__all__ = ["context_tar", "ignore_patterns", "is_ignored"]


def ignore_patterns(text: str) -> list[tuple[bool, re.Pattern[str]]]:
    """The patterns of a ``.dockerignore``: (is an exception, regex of the cleaned path)."""
    patterns: list[tuple[bool, re.Pattern[str]]] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        exception = line.startswith("!")
        line = line[1:].strip() if exception else line
        line = os.path.normpath(line).lstrip("/")
        if line in ("", "."):
            continue
        patterns.append((exception, re.compile(_regex(line))))
    return patterns


def _regex(pattern: str) -> str:
    out = []
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
            if pattern.startswith("/", i):
                out[-1] = "(?:.*/)?"
                i += 1
            continue
        if ch == "*":
            out.append("[^/]*")
        elif ch == "?":
            out.append("[^/]")
        else:
            out.append(re.escape(ch))
        i += 1
    # A pattern that names a directory excludes what is under it.
    return "^" + "".join(out) + "(?:/.*)?$"


def is_ignored(path: str, patterns: list[tuple[bool, re.Pattern[str]]]) -> bool:
    """Whether ``path`` (relative, ``/``-separated) is left out: the last match decides."""
    ignored = False
    for exception, regex in patterns:
        if regex.match(path):
            ignored = not exception
    return ignored


def _files(root: Path) -> Iterator[Path]:
    for folder, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(files) + [d for d in dirs if (Path(folder) / d).is_symlink()]:
            yield Path(folder) / name
        for name in dirs:
            path = Path(folder) / name
            if not path.is_symlink() and not any(path.iterdir()):
                yield path  # an empty directory


def context_tar(root: Path, dockerfile: str = "Dockerfile") -> Path:
    """``root`` less what its ``.dockerignore`` excludes, as a temporary tar file (the
    caller deletes it)."""
    ignore = root / ".dockerignore"
    patterns = ignore_patterns(ignore.read_text("utf-8")) if ignore.is_file() else []
    always = {os.path.normpath(dockerfile), ".dockerignore"}
    handle, name = tempfile.mkstemp(prefix="berth-context-", suffix=".tar")
    os.close(handle)
    try:
        with tarfile.open(name, "w") as archive:
            for path in _files(root):
                relative = path.relative_to(root).as_posix()
                if relative not in always and is_ignored(relative, patterns):
                    continue
                archive.add(path, arcname=relative, recursive=False)
    except BaseException:
        os.unlink(name)
        raise
    return Path(name)
