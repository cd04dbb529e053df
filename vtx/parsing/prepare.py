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
from vtx.parsing.trees import ROOT_LABEL, Tree, normalize, read_mrg

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


def split_lines(files: Sequence[Path], slots: str = "xx",
                subtrees: int = 0) -> tuple[list[tuple[str, str, str]], int]:
    """(words, linearized tree, gold tree) lines of the trees in `files`, and how many were dropped.

    With `subtrees` N > 0, each tree's line is followed by one line for every phrase below its
    root that spans at least N words (pre-order): the phrase's words and its own tree, a
    training pair of its own (see `prepare`).

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
            lines.append(_line(normal, slots))
            if subtrees:
                lines.extend(_line(Tree(ROOT_LABEL, [phrase]), slots)
                             for phrase in _phrases(normal, subtrees))
    return lines, dropped


def _line(tree: Tree, slots: str) -> tuple[str, str, str]:
    words, target = linearize(tree, slots)
    return " ".join(words), " ".join(target), tree.to_string()


def _phrases(tree: Tree, min_words: int) -> list[Tree]:
    """The phrases (not preterminals) strictly below the sentence's root with >= min_words words."""
    root = tree.children[0] if tree.label == ROOT_LABEL and len(tree.children) == 1 else tree
    return [node for node in root.subtrees()
            if node is not root and not node.is_preterminal and len(node.leaves()) >= min_words]


def prepare(splits: Mapping[str, Sequence[Path]], destdir: str | Path,
            slots: str = "xx", train_subtrees: int = 0,
            force: bool = False) -> dict[str, SplitSummary]:
    """Writes `PREFIX.words`, `PREFIX.trees` and `PREFIX.gold` for every split in `destdir`, and
    `brackets.txt` when there is a `train` split.

    Args:
        splits: split prefix -> treebank files, e.g. from `wsj_split`.
        destdir: output folder (created when missing).
        slots: what stands for each word in the targets (`linearize.SLOTS`).
        train_subtrees: N > 0 adds to the `train` split, after each sentence, every phrase of
            its tree spanning >= N words as a pair of its own (its words -> its subtree): more,
            shorter training pairs from the same trees (data augmentation for a small
            treebank); the other splits never get them. 0: off.
        force: replace outputs already in `destdir` (else they are refused, before any work).

    Returns:
        Split prefix -> what was written.

    Raises:
        FileExistsError: an output is already there and `force` is false.
        FileNotFoundError, TreeSyntaxError: a treebank file is missing or malformed; nothing is
            left in `destdir` then.
    """
    destdir = Path(destdir)
    outputs = [destdir / f"{prefix}.{suffix}" for prefix in splits for suffix in SUFFIXES]
    outputs += [destdir / BRACKETS_FILE] if TRAIN_SPLIT in splits else []
    existing = [path for path in outputs if path.exists()]
    if existing and not force:
        more = f" (and {len(existing) - 1} more of the outputs)" if len(existing) > 1 else ""
        raise FileExistsError(f"{existing[0]} already exists{more} (use --force to replace "
                              f"the outputs)")
    created = not destdir.exists()
    destdir.mkdir(parents=True, exist_ok=True)
    summaries = {}
    try:
        with atomic.replaced_together() as temporary:
            for prefix, files in splits.items():
                lines, dropped = split_lines(files, slots,
                                             train_subtrees if prefix == TRAIN_SPLIT else 0)
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
