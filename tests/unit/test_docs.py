"""The documentation: README.md stays a front page, and no link leaves the repository.

* Every relative link (Markdown ``[text](target)``, ``![alt](target)``, reference
  definitions, HTML ``href``/``src``) in README.md and ``docs/**/*.md`` names a file or
  folder inside the repository that exists; none climbs out of it (``../shared/…``), none
  is absolute (``/api/…`` is a path on a running berth: write it as code).
* Links to other sites go only to the upstream projects listed in ``EXTERNAL_HOSTS``
  (docs/decisions/2026-11-26-no-link-leaves-the-repository.md).
* Every page of ``docs/`` is in ``mkdocs.yml``'s nav, except the decision records, which
  ``docs/decisions/index.md`` lists (all of them, each named ``YYYY-MM-DD-slug.md``).

``mkdocs build --strict`` (``nox -s docs``) checks the links between the site's pages
and their anchors; this checks what it does not see: README.md, raw HTML, the nav.
"""

from __future__ import annotations

import re
import urllib.parse
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
DECISIONS = DOCS / "decisions"
README = ROOT / "README.md"

#: The only other sites the documentation links to: the specifications berth follows.
EXTERNAL_HOSTS = {
    "modelcontextprotocol.io",  # MCP
    "www.standardwebhooks.com",  # Standard Webhooks
}

_FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.M | re.S)
_CODE_SPAN = re.compile(r"(`+).+?\1", re.S)
_INLINE = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$", re.M)
_HTML = re.compile(r"\b(?:href|src)\s*=\s*[\"']([^\"']+)[\"']")
_RECORD = re.compile(r"\d{4}-\d{2}-\d{2}-[a-z0-9]+(?:-[a-z0-9]+)*\.md")


def links(markdown: str) -> list[str]:
    """The link targets of ``markdown``, outside code blocks and code spans."""
    prose = _CODE_SPAN.sub("", _FENCE.sub("", markdown))
    return [m.group(1) for pattern in (_INLINE, _REFERENCE, _HTML) for m in pattern.finditer(prose)]


def problem(document: Path, target: str) -> str | None:
    """Why ``target``, linked from ``document``, leaves the repository or names nothing."""
    parsed = urllib.parse.urlsplit(target)
    if parsed.scheme in ("http", "https"):
        if parsed.hostname in EXTERNAL_HOSTS:
            return None
        return f"{target}: another site (allowed: {', '.join(sorted(EXTERNAL_HOSTS))})"
    if parsed.scheme or parsed.netloc:
        return f"{target}: not a file of the repository"
    if not parsed.path:
        return None  # an anchor on the same page: mkdocs --strict checks the site's
    if parsed.path.startswith("/"):
        return f"{target}: an absolute path (write a running berth's paths as code)"
    resolved = (document.parent / urllib.parse.unquote(parsed.path)).resolve()
    if not resolved.is_relative_to(ROOT):
        return f"{target}: outside the repository (a reader's clone has no such file)"
    if not resolved.exists():
        return f"{target}: no such file"
    return None


def documents() -> list[Path]:
    """README.md and every Markdown file under docs/."""
    return [README, *sorted(DOCS.rglob("*.md"))]


@pytest.mark.parametrize("document", documents(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_link_leaves_the_repository(document: Path) -> None:
    """Every link of a document names an existing file of the repository or a listed site."""
    found = [problem(document, target) for target in links(document.read_text())]
    assert [p for p in found if p] == []


@pytest.mark.parametrize(
    ("target", "bad"),
    [
        ("../shared/DESIGN.md", True),
        ("/api/agent/openapi.json", True),
        ("https://example.com/", True),
        ("file:///etc/passwd", True),
        ("docs/nothing-here.md", True),
        ("docs/architecture.md#the-path-of-a-deploy", False),
        ("#first-steps", False),
        ("https://modelcontextprotocol.io", False),
    ],
)
def test_link_rules(target: str, bad: bool) -> None:
    """The check refuses a link out of the repository, an absolute path, an unlisted site
    and a missing file; it takes a file of the repository, an anchor and a listed site."""
    assert (problem(README, target) is not None) == bad


def test_links_skip_code() -> None:
    """Link syntax in a code block or a code span is code, not a link."""
    text = 'See [a](a.md).\n\n```sh\n[b](b.md)\n```\n\n`[c](c.md)` and <img src="d.png">\n'
    assert links(text) == ["a.md", "d.png"]


def test_readme_is_a_front_page() -> None:
    """README.md is under 15 KB and names the two commands; .ci/run runs its test command."""
    text = README.read_text()
    assert len(text.encode()) < 15 * 1024
    assert "scripts/dev serve" in text
    assert "scripts/dev test" in text
    assert "exec scripts/dev test\n" in (ROOT / ".ci" / "run").read_text()


def _nav_pages(nav: object) -> set[str]:
    if isinstance(nav, str):
        return {nav}
    if isinstance(nav, list):
        return set().union(*(_nav_pages(item) for item in nav))
    if isinstance(nav, dict):
        return set().union(*(_nav_pages(value) for value in nav.values()))
    return set()


def test_every_page_is_in_the_nav() -> None:
    """Each page under docs/ (the decision records aside) is in mkdocs.yml's nav."""
    nav = _nav_pages(yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"])
    pages = {
        str(p.relative_to(DOCS))
        for p in DOCS.rglob("*.md")
        if p.parent != DECISIONS or p.name == "index.md"
    }
    assert sorted(pages - nav) == []
    assert sorted(nav - pages) == []


def test_every_decision_is_in_the_index() -> None:
    """docs/decisions/ holds ``YYYY-MM-DD-slug.md`` records, each linked from its index."""
    records = sorted(p.name for p in DECISIONS.glob("*.md") if p.name != "index.md")
    assert records
    assert [name for name in records if not _RECORD.fullmatch(name)] == []
    listed = {urllib.parse.urlsplit(t).path for t in links((DECISIONS / "index.md").read_text())}
    missing = [f"* [title]({name})" for name in records if name not in listed]
    assert missing == [], "add to docs/decisions/index.md:\n" + "\n".join(missing)
