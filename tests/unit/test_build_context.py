"""``berth deploy --build DIR``'s context: the directory as a tar archive, less what its
``.dockerignore`` excludes, read as Docker reads it."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest
from berth.entrypoints.cli.context import context_tar, ignore_patterns, is_ignored


@pytest.mark.parametrize(
    ("path", "ignored"),
    [
        ("node_modules/a/b.js", True),  # a directory pattern excludes what is under it
        ("src/app.log", True),  # **/*.log at any depth
        ("app.log", True),
        ("keep.log", False),  # an exception after the pattern wins
        ("secrets/.env", True),
        ("src/main.py", False),
        ("docs/x.md", True),  # *.md in docs/ ...
        ("docs/sub/x.md", False),  # ... but not below it: * stays in one segment
    ],
)
def test_dockerignore_patterns_as_docker_reads_them(path: str, ignored: bool) -> None:
    """``**``, ``*`` within a segment, directories, ``!`` exceptions, the last match wins."""
    patterns = ignore_patterns(
        "# comment\n\n./node_modules\n**/*.log\n!keep.log\n/secrets/\ndocs/*.md\n"
    )
    assert is_ignored(path, patterns) is ignored


def test_the_context_leaves_out_ignored_files_but_never_the_dockerfile(tmp_path: Path) -> None:
    """Ignored files stay home; the Dockerfile and .dockerignore are sent even if matched."""
    (tmp_path / "Dockerfile").write_text("FROM scratch\n")
    (tmp_path / ".dockerignore").write_text("*\n!app\n")
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "main.py").write_text("print(1)\n")
    (tmp_path / "big.bin").write_bytes(b"\0" * 1000)
    packed = context_tar(tmp_path)
    try:
        with tarfile.open(packed) as archive:
            names = sorted(archive.getnames())
    finally:
        packed.unlink()
    assert names == [".dockerignore", "Dockerfile", "app/main.py"]
