"""Every relative link in README.md and docs/**/*.md resolves to a file or folder of the repository,
and every #anchor to a heading of the page it names (pure: reads the Markdown only)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]

FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)
CODE = re.compile(r"`+[^`\n]*`+")
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$", re.M)


def _prose(text: str) -> str:
    """The page without fenced code blocks and inline code (a link inside them is not a link)."""
    return CODE.sub("x", FENCE.sub("", text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "").strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    found: set[str] = set()
    for h in HEADING.findall(FENCE.sub("", page.read_text(encoding="utf-8"))):
        base = slug(h)
        name, n = base, 1
        while name in found:  # GitHub numbers repeated headings: name, name-1, name-2
            name, n = f"{base}-{n}", n + 1
        found.add(name)
    return found


def relative_links(text: str) -> list[str]:
    return [t for t in LINK.findall(_prose(text))
            if not re.match(r"^[a-z][a-z0-9+.-]*:", t, re.I)]  # http:, https:, mailto: ...


def broken(page: Path, text: str | None = None) -> list[str]:
    """The relative links of `page` (its text, or `text` as if it were at `page`) that do not resolve."""
    bad = []
    for target in relative_links(page.read_text(encoding="utf-8") if text is None else text):
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        try:
            dest.relative_to(ROOT)
        except ValueError:
            bad.append(f"{target}: outside the repository")
            continue
        if not dest.exists():
            bad.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor.lower() not in anchors(dest):
            bad.append(f"{target}: no heading #{anchor} in {dest.relative_to(ROOT)}")
    return bad


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page: Path) -> None:
    assert broken(page) == []


def test_checker_catches_what_it_should() -> None:
    assert slug("One prompt: `run --compare`") == "one-prompt-run---compare"
    assert slug("Concurrent requests (`serve --parallel N`)") == "concurrent-requests-serve---parallel-n"
    text = ("[a](missing.md) [b](ARCHITECTURE.md#glossary) [c](ARCHITECTURE.md#nope) `[d](gone.md)`\n"
            "```\n[e](gone.md)\n```\n[f](https://example.com/x) ![g](../../outside.png) [h](#glossary)\n")
    assert relative_links(text) == ["missing.md", "ARCHITECTURE.md#glossary", "ARCHITECTURE.md#nope",
                                    "../../outside.png", "#glossary"]
    # as if the page were docs/ARCHITECTURE.md: #glossary is one of its own headings
    found = [b.split(":")[0] for b in broken(ROOT / "docs" / "ARCHITECTURE.md", text)]
    assert found == ["missing.md", "ARCHITECTURE.md#nope", "../../outside.png"]
