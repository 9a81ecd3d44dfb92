"""The documentation holds together: every relative link resolves, and the README stays a short front page.

A renamed or deleted docs page otherwise leaves dead links that nobody notices until a reader clicks one.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
README = REPO_ROOT / "README.md"
README_MAX_BYTES = 10 * 1024

# [text](target) and ![alt](target); the target ends at whitespace or ')' (an optional "title" follows).
_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
_INLINE_CODE = re.compile(r"`[^`\n]*`")


def markdown_files() -> list[Path]:
    return [README, *sorted((REPO_ROOT / "docs").glob("*.md"))]


def relative_links(text: str) -> list[str]:
    """Link targets outside code, without web links, mail links or pure anchors; anchors are stripped."""
    text = _INLINE_CODE.sub("", _FENCE.sub("", text))
    targets = []
    for target in _LINK.findall(text):
        if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target) or target.startswith("#"):
            continue
        path = target.split("#", 1)[0].split("?", 1)[0]
        if path:
            targets.append(path)
    return targets


def test_link_parser_finds_relative_links_only() -> None:
    text = (
        "[a](docs/a.md) ![img](img/x.png) [b](b.md#anchor) [web](https://x.org/y.md) [c](#local)\n"
        '`[not](code.md)`\n```\n[also not](fenced.md)\n```\n[t](t.md "title")'
    )
    assert relative_links(text) == ["docs/a.md", "img/x.png", "b.md", "t.md"]


@pytest.mark.parametrize("page", markdown_files(), ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_every_relative_link_points_to_a_file(page: Path) -> None:
    broken = []
    for target in relative_links(page.read_text(encoding="utf-8")):
        resolved = (page.parent / target).resolve()
        if not resolved.exists():
            broken.append(target)
    assert not broken, f"{page.relative_to(REPO_ROOT)} links to missing files: {', '.join(broken)}"


def test_readme_is_short() -> None:
    size = len(README.read_bytes())
    assert size <= README_MAX_BYTES, (
        f"README.md is {size} bytes, over {README_MAX_BYTES}: move the detail into a docs/ page and link it"
    )


def test_readme_opens_with_the_two_commands() -> None:
    first_lines = README.read_text(encoding="utf-8").splitlines()[:10]
    commands = [line.split("#", 1)[0].strip() for line in first_lines]
    assert "make demo" in commands, "README.md must show `make demo` within its first 10 lines"
    assert "make test" in commands, "README.md must show `make test` within its first 10 lines"
    assert commands.index("make demo") < commands.index("make test")
