"""The user docs stay readable: short table cells, no link to a missing file or heading."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted((ROOT / "docs").glob("*.md"))
MAX_CELL_WORDS = 30

# [text](target) and ![alt](target); the target ends at whitespace or the closing parenthesis.
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
# A cell boundary is a `|` not escaped as `\|` (Markdown's way to put one inside a cell).
CELL_BOUNDARY = re.compile(r"(?<!\\)\|")


def _prose_lines(path: Path) -> list[tuple[int, str]]:
    """The file's lines outside fenced code blocks, numbered from 1."""
    lines, in_fence = [], False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if line.lstrip().startswith("```"):
            in_fence = not in_fence
            continue
        if not in_fence:
            lines.append((number, line))
    return lines


def _table_cells(line: str) -> list[str]:
    """The cells of one Markdown table row; none for a separator row or a line outside a table."""
    stripped = line.strip()
    if not stripped.startswith("|"):
        return []
    cells = [cell.strip() for cell in CELL_BOUNDARY.split(stripped.strip("|"))]
    if all(re.fullmatch(r":?-+:?", cell) for cell in cells if cell):
        return []
    return cells


def _anchors(path: Path) -> set[str]:
    """GitHub's anchors for the headings of a Markdown file (lowercase, punctuation dropped)."""
    anchors = set()
    for _, line in _prose_lines(path):
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            anchors.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return anchors


def test_anchors_are_githubs():
    assert re.sub(r"[^\w\- ]", "", "where issue 12's targets stand").replace(" ", "-") == (
        "where-issue-12s-targets-stand"
    )


def test_table_cells_split_on_unescaped_bars_only():
    assert _table_cells(r"| a | `x \| y` | c |") == ["a", r"`x \| y`", "c"]
    assert _table_cells("|---|:---:|") == []
    assert _table_cells("not a table | row") == []


@pytest.mark.parametrize("path", DOCS, ids=lambda path: path.name)
def test_no_table_cell_holds_more_than_30_words(path):
    long_cells = [
        f"{path.name}:{number}: {len(cell.split())} words: {cell[:60]}..."
        for number, line in _prose_lines(path)
        for cell in _table_cells(line)
        if len(cell.split()) > MAX_CELL_WORDS
    ]
    assert not long_cells, "\n".join(long_cells)


@pytest.mark.parametrize("path", [*DOCS, ROOT / "README.md"], ids=lambda path: path.name)
def test_every_relative_link_and_image_points_to_a_file_and_heading(path):
    broken = []
    for number, line in _prose_lines(path):
        for target in LINK.findall(line):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue  # a web address, a mail address, or an anchor in the same file
            file_part, _, anchor = target.partition("#")
            linked = path.parent / file_part
            if not linked.exists():
                broken.append(f"{path.name}:{number}: {target}")
            elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked):
                broken.append(f"{path.name}:{number}: {target} (no such heading)")
    assert not broken, "\n".join(broken)


# Headline figures, each stated in one page of docs/, the README or a recipe's README; other pages
# link to it. A second page stating one is how two pages come to disagree when it is measured
# again. history.md, a record of what was measured when, is not a page of current figures.
HEADLINE_FIGURES = {
    "38.84": "docs/results.md",        # quick start BLEU, Intel Xeon with AMX
    "36.56": "docs/results.md",        # quick start BLEU, AMD EPYC Zen 3
    "5,732": "docs/results.md",        # quick start median tok/s, Intel Xeon with AMX
    "1,477": "docs/results.md",        # quick start median tok/s, AMD EPYC Zen 3
    "70.66": "recipes/wsj_parsing/README.md",  # WSJ sample parser test F1
    "**0.83x**": "docs/results.md",    # vtx translate's defaults against CTranslate2's fastest
    "39.0%": "docs/benchmarks.md",     # big's MFU on one H200
    "0.11-0.13 s": "docs/decoding.md",  # vtx's search on one H200, with XLA
    "250,233": "docs/benchmarks.md",   # base at 8,192 tokens, vtx tok/s on one H100
    "1000/1000": "docs/export.md",     # lines identical between an export and vtx translate
    "39.82": "docs/results.md",        # quick start with EMA, the last 5 averaged
    "7,577,600": "docs/results.md",    # the quick start model's parameters
    "63,082,496": "docs/results.md",   # base's parameters at a vocabulary of 37,000
    "214,245,376": "docs/results.md",  # big's parameters at a vocabulary of 37,000
}


def test_each_headline_figure_is_stated_in_exactly_one_page():
    pages = [path for path in [*DOCS, ROOT / "README.md", *ROOT.glob("recipes/*/README.md")]
             if path.name != "history.md"]
    misplaced = []
    for figure, home in HEADLINE_FIGURES.items():
        holders = sorted(str(path.relative_to(ROOT)) for path in pages
                         if figure in path.read_text(encoding="utf-8"))
        if holders != [home]:
            misplaced.append(f"{figure!r}: in {holders or 'no page'}, expected only in {home}")
    assert not misplaced, "\n".join(misplaced)


# The docs a newcomer reads: the README, docs/ and each recipe's README, counted as str.split().
MAX_DOC_WORDS = 25_000


def test_the_docs_stay_within_25000_words():
    pages = [ROOT / "README.md", *DOCS, *sorted(ROOT.glob("recipes/*/README.md"))]
    words = {str(path.relative_to(ROOT)): len(path.read_text(encoding="utf-8").split())
             for path in pages}
    total = sum(words.values())
    largest = ", ".join(f"{name} {count:,}" for name, count
                        in sorted(words.items(), key=lambda item: -item[1])[:5])
    assert total <= MAX_DOC_WORDS, (
        f"README.md + docs/*.md + recipes/*/README.md hold {total:,} words, past "
        f"{MAX_DOC_WORDS:,}: say a thing once and link to it. Largest: {largest}")
