"""Treebank -> linearized parallel text for training a parser as a translation model.

For every split PREFIX (`train`, `valid`, `test`) three line-aligned files are written:
`PREFIX.words` (the sentence), `PREFIX.trees` (its linearized tree, see `linearize`) and
`PREFIX.gold` (the normalised tree on one line, `(TOP ...)`, for `evalb` scoring). `brackets.txt`
lists the bracket tokens of the training trees (`(NP`, `)NP`, ...), one a line, for `vtx preprocess
--whole-word-symbols` to keep each as one vocabulary piece. All files are first written under
temporary names and renamed only once every split is complete.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from vtx import atomic
from vtx.parsing.linearize import linearize
from vtx.parsing.trees import normalize, read_mrg

# The standard WSJ split for parsing (Collins 1997 and after): train 02-21, dev 22, test 23.
WSJ_SECTIONS = {"train": [f"{s:02d}" for s in range(2, 22)], "valid": ["22"], "test": ["23"]}
SUFFIXES = ("words", "trees", "gold")
BRACKETS_FILE = "brackets.txt"
# The split whose bracket tokens go to BRACKETS_FILE (the vocabulary is trained on it).
TRAIN_SPLIT = "train"


@dataclasses.dataclass(frozen=True)
class SplitSummary:
    """What one split's files hold.

    Attributes:
        files: treebank files read.
        sentences: lines written.
        dropped: trees left empty by normalisation (nothing but `-NONE-` elements), not written.
    """

    files: int
    sentences: int
    dropped: int


def wsj_split(treebank_dir: str | Path) -> dict[str, list[Path]]:
    """Files of the standard split in the LDC layout `SS/wsj_SSNN.mrg`.

    Args:
        treebank_dir: the folder holding the section folders `00` ... `24` (the LDC `.../mrg/wsj`),
            or a folder with such a `wsj` folder inside.

    Returns:
        {"train": [...], "valid": [...], "test": [...]}, each sorted.

    Raises:
        FileNotFoundError: a section folder is missing or holds no `wsj_*.mrg` file.
    """
    root = Path(treebank_dir)
    if not (root / "02").is_dir() and (root / "wsj").is_dir():
        root = root / "wsj"
    splits: dict[str, list[Path]] = {}
    for split, sections in WSJ_SECTIONS.items():
        splits[split] = []
        for section in sections:
            files = sorted((root / section).glob(f"wsj_{section}*.mrg"))
            if not files:
                raise FileNotFoundError(f"no {root / section / f'wsj_{section}NN.mrg'} files: "
                                        f"{treebank_dir} is not the LDC layout wsj/SS/wsj_SSNN.mrg")
            splits[split].extend(files)
    return splits


def split_lines(files: Sequence[Path], slots: str = "xx") -> tuple[list[tuple[str, str, str]], int]:
    """(words, linearized tree, gold tree) lines of the trees in `files`, and how many were dropped.

    Raises:
        FileNotFoundError, TreeSyntaxError: see `trees.read_mrg`.
    """
    lines, dropped = [], 0
    for path in files:
        for tree in read_mrg(path):
            normal = normalize(tree)
            if normal is None:
                dropped += 1
                continue
            words, target = linearize(normal, slots)
            lines.append((" ".join(words), " ".join(target), normal.to_string()))
    return lines, dropped


def prepare(splits: Mapping[str, Sequence[Path]], destdir: str | Path,
            slots: str = "xx") -> dict[str, SplitSummary]:
    """Writes `PREFIX.words`, `PREFIX.trees` and `PREFIX.gold` for every split in `destdir`, and
    `brackets.txt` when there is a `train` split.

    Args:
        splits: split prefix -> treebank files, e.g. from `wsj_split`.
        destdir: output folder (created when missing).
        slots: what stands for each word in the targets (`linearize.SLOTS`).

    Returns:
        Split prefix -> what was written.

    Raises:
        FileNotFoundError, TreeSyntaxError: a treebank file is missing or malformed; nothing is
            left in `destdir` then.
    """
    destdir = Path(destdir)
    created = not destdir.exists()
    destdir.mkdir(parents=True, exist_ok=True)
    summaries = {}
    try:
        with atomic.replaced_together() as temporary:
            for prefix, files in splits.items():
                lines, dropped = split_lines(files, slots)
                for column, suffix in enumerate(SUFFIXES):
                    _write_lines(temporary(destdir / f"{prefix}.{suffix}"),
                                 (line[column] for line in lines))
                summaries[prefix] = SplitSummary(len(files), len(lines), dropped)
                if prefix == TRAIN_SPLIT:
                    _write_lines(temporary(destdir / BRACKETS_FILE),
                                 bracket_tokens(line[1] for line in lines))
    except BaseException:
        if created and not any(destdir.iterdir()):  # a failed run leaves no empty folder behind
            destdir.rmdir()
        raise
    return summaries


def bracket_tokens(targets: Iterable[str]) -> list[str]:
    """The distinct bracket tokens (`(NP`, `)NP`, ...) of linearized targets, sorted."""
    return sorted({token for target in targets for token in target.split() if token[0] in "()"})


def _write_lines(path: Path, lines: Iterable[str]) -> None:
    with open(path, "w", encoding="utf-8") as out:
        for line in lines:
            out.write(line + "\n")
