"""The Markdown pages hold together, and the README stays short.

Every relative link ``[text](path)`` and picture ``![alt](path)`` of every Markdown file of the
repository points at a file that exists inside it; a link to ``page.md#heading`` also needs that
heading (GitHub's slug). Web links (``http(s)://``, ``mailto:``) and a page's own ``#anchors`` are not
followed; links inside code are not links. A broken one is named by file, line and target.
"""

import os
import re
from pathlib import Path
from urllib.parse import unquote

ROOT = Path(__file__).resolve().parents[1]
README_MAX_LINES = 150
# Folders that hold no page of the course: git, environments, build output, caches. Under data/
# only data/README.md is the course's (the rest is downloaded and git-ignored).
SKIPPED = {".git", ".venv", "venv", "build", "dist", "node_modules", "__pycache__",
           ".ipynb_checkpoints", ".pytest_cache", ".ruff_cache", "runs"}

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1")
# The destination of an inline link or picture, with an optional title: ](path "title")
DESTINATION = re.compile(r"\]\(\s*(<[^>\n]*>|[^)\s]+)(?:\s+(?:\"[^\"]*\"|'[^']*'))?\s*\)")
REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*(<[^>\n]*>|\S+)")
HTML_TARGET = re.compile(r"""<(?:a|img|source)\b[^>]*?\b(?:href|src)\s*=\s*["']([^"']+)["']""", re.I)
HTML_ANCHOR = re.compile(r"""<[a-z]+\b[^>]*?\b(?:id|name)\s*=\s*["']([^"']+)["']""", re.I)
HEADING = re.compile(r"^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:|^//")
PICTURE = (".png", ".jpg", ".jpeg", ".gif", ".svg", ".webp")


def markdown_files(root: Path = ROOT) -> list[Path]:
    """Every ``*.md`` under ``root``, outside the folders in :data:`SKIPPED` and ``data/``'s downloads."""
    found = []
    for folder, dirs, files in os.walk(root):
        here = Path(folder)
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED and not d.endswith(".egg-info")
                         and here.relative_to(root) != Path("data"))
        found += [here / name for name in sorted(files) if name.lower().endswith(".md")]
    return found


def _prose_lines(text: str):
    """(line number, line) outside fenced code blocks."""
    fence = None
    for number, line in enumerate(text.splitlines(), 1):
        opening = FENCE.match(line)
        if fence is None and opening:
            fence = opening.group(1)[0] * len(opening.group(1))
        elif fence is not None and line.strip().startswith(fence):
            fence = None
        elif fence is None:
            yield number, line


def link_targets(text: str) -> list[tuple[int, str]]:
    """(line number, destination) of every link and picture, code spans and blocks left out."""
    targets = []
    for number, line in _prose_lines(text):
        prose = INLINE_CODE.sub(lambda match: " " * len(match.group(0)), line)
        for pattern in (DESTINATION, REFERENCE, HTML_TARGET):
            targets += [(number, match.group(1).strip("<>")) for match in pattern.finditer(prose)]
    return targets


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text: the words, lower-cased, joined by hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link or picture: its text
    text = re.sub(r"<[^>]+>", "", text).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every anchor a link into ``page`` may name: its headings' slugs (a repeated one gets -1,
    -2…) and explicit ``id``/``name`` attributes."""
    seen: dict[str, int] = {}
    found = set()
    for _, line in _prose_lines(page.read_text(encoding="utf-8")):
        found |= set(HTML_ANCHOR.findall(line))
        heading = HEADING.match(line)
        if heading:
            base = slug(heading.group(1))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
    return found


def broken_links(page: Path, root: Path = ROOT) -> list[str]:
    """``file:line: broken link|picture 'target' (why)`` for each target of ``page`` that fails."""
    problems = []
    name = page.relative_to(root).as_posix()
    for number, target in link_targets(page.read_text(encoding="utf-8")):
        if not target or SCHEME.match(target) or target.startswith("#"):
            continue
        path, _, anchor = target.partition("#")
        path = unquote(path.partition("?")[0])
        resolved = (root / path.lstrip("/")) if path.startswith("/") else (page.parent / path)
        resolved = Path(os.path.normpath(resolved))
        kind = "picture" if path.lower().endswith(PICTURE) else "link"
        why = None
        if not resolved.is_relative_to(root):
            why = "outside the repository"
        elif not resolved.exists():
            why = "no such file"
        elif anchor and resolved.suffix.lower() == ".md" and unquote(anchor) not in anchors(resolved):
            why = f"no heading #{anchor} in {resolved.relative_to(root).as_posix()}"
        if why:
            problems.append(f"{name}:{number}: broken {kind} {target!r} ({why})")
    return problems


def test_every_relative_link_and_picture_resolves():
    pages = markdown_files()
    assert {"README.md", "CONTRIBUTING.md", "CHANGELOG.md", "docs/glossary.md",
            "data/README.md"} <= {page.relative_to(ROOT).as_posix() for page in pages}
    problems = [problem for page in pages for problem in broken_links(page)]
    assert not problems, "\n".join(problems)


def test_readme_reads_in_two_minutes():
    lines = len((ROOT / "README.md").read_text(encoding="utf-8").splitlines())
    assert lines < README_MAX_LINES, (f"README.md has {lines} lines; keep it under {README_MAX_LINES} "
                                      "and move the rest to the page of its reader (docs/)")


def test_a_broken_link_picture_or_heading_is_named_by_file_and_line(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "shown.png").write_bytes(b"")
    (tmp_path / "docs" / "page.md").write_text("# A page\n\n## Grades into Moodle: the steps\n\n"
                                               "## Again\n## Again\n", encoding="utf-8")
    (tmp_path / ".venv").mkdir()
    (tmp_path / ".venv" / "vendored.md").write_text("[gone](nowhere.md)\n", encoding="utf-8")
    (tmp_path / "README.md").write_text(
        "# Title\n"
        "[fine](docs/page.md), ![fine](docs/shown.png), [steps](docs/page.md#grades-into-moodle-the-steps)\n"
        "[gone](docs/missing.md)\n"
        "![gone](docs/missing.png \"a title\")\n"
        "[no heading](docs/page.md#no-such-heading) and [second](docs/page.md#again-1)\n"
        "[web](https://example.org/x.md) [mail](mailto:a@b.c) [here](#title) `[code](not/a/link.md)`\n"
        "```\n[in a block](not/a/link.md)\n```\n"
        "[outside](../elsewhere.md)\n"
        "[![badge](docs/shown.png)](docs/absent/)\n", encoding="utf-8")

    assert [page.relative_to(tmp_path).as_posix() for page in markdown_files(tmp_path)] == [
        "README.md", "docs/page.md"]
    assert broken_links(tmp_path / "README.md", tmp_path) == [
        "README.md:3: broken link 'docs/missing.md' (no such file)",
        "README.md:4: broken picture 'docs/missing.png' (no such file)",
        "README.md:5: broken link 'docs/page.md#no-such-heading' "
        "(no heading #no-such-heading in docs/page.md)",
        "README.md:10: broken link '../elsewhere.md' (outside the repository)",
        "README.md:11: broken link 'docs/absent/' (no such file)",
    ]
    assert broken_links(tmp_path / "docs" / "page.md", tmp_path) == []


def test_anchors_follow_githubs_slugs():
    assert slug("Without this repository: Colab, Binder, a JupyterHub") == (
        "without-this-repository-colab-binder-a-jupyterhub")
    assert slug("Honest checks: the kernel's guard") == "honest-checks-the-kernels-guard"
    assert slug("`make grade`, its options") == "make-grade-its-options"
    assert slug("Lección 01 · Tensores") == "lección-01--tensores"
    assert slug("The [glossary](docs/glossary.md)") == "the-glossary"
