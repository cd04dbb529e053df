"""Penn Treebank constituency trees: reading `.mrg` files, one-line bracketed text, normalisation.

A tree is a `Tree` whose children are trees or, for a preterminal, a single word (a `str`):
`(NP (DT the) (NN cat))` is `Tree("NP", [Tree("DT", ["the"]), Tree("NN", ["cat"])])`.
The Penn Treebank wraps every tree in an outer bracket with an empty label, `( (S ...) )`;
`normalize` renames that root `TOP`, the label EVALB's COLLINS.prm deletes.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Union

from vtx.errors import TreeSyntaxError

# Label of the root added around every tree; EVALB (COLLINS.prm) deletes it when scoring.
ROOT_LABEL = "TOP"
# Part-of-speech tag of empty elements (traces, zero complementizers).
EMPTY_ELEMENT_TAG = "-NONE-"

# Brackets nested deeper are refused when read: the tree code recurses (normalizing,
# linearizing, writing), and past a few hundred levels Python's recursion limit would stop it
# with a traceback after the reading had passed.
MAX_DEPTH = 200
_TOKEN_RE = re.compile(r"\(|\)|[^\s()]+")


@dataclasses.dataclass
class Tree:
    """A constituent: a label over child trees, or a preterminal over one word.

    Attributes:
        label: the node label (`NP-SBJ-1`, `NN`, `-LRB-`, or `""` for the PTB's outer bracket).
        children: child `Tree`s, or exactly one `str` (the word) for a preterminal.
    """

    label: str
    children: list[Union["Tree", str]] = dataclasses.field(default_factory=list)

    @property
    def is_preterminal(self) -> bool:
        """True for a part-of-speech node over one word."""
        return len(self.children) == 1 and isinstance(self.children[0], str)

    def leaves(self) -> list[str]:
        """The words, left to right."""
        return [word for word, _ in self.tagged_words()]

    def tagged_words(self) -> list[tuple[str, str]]:
        """(word, part-of-speech tag) pairs, left to right."""
        if self.is_preterminal:
            return [(self.children[0], self.label)]
        pairs: list[tuple[str, str]] = []
        for child in self.children:
            pairs.extend(child.tagged_words())
        return pairs

    def subtrees(self) -> Iterator["Tree"]:
        """This node and every node below it, in pre-order."""
        yield self
        if not self.is_preterminal:
            for child in self.children:
                yield from child.subtrees()

    def to_string(self) -> str:
        """One-line bracketed text, e.g. `(TOP (S (NP (DT the) (NN cat)) (VP (VBZ sleeps))))`."""
        if self.is_preterminal:
            return f"({self.label} {self.children[0]})"
        inner = " ".join(child.to_string() for child in self.children)
        return f"({self.label} {inner})" if inner else f"({self.label})"

    def __str__(self) -> str:
        return self.to_string()


def _tokenize(text: str) -> list[str]:
    return _TOKEN_RE.findall(text)


def _parse_node(tokens: list[str], pos: int, where: str, depth: int = 1) -> tuple[Tree, int]:
    """Parses the bracket opening at `tokens[pos]` (`depth` brackets deep); returns the tree and
    the index after it."""
    if depth > MAX_DEPTH:
        raise TreeSyntaxError(f"{where}: brackets nested more than {MAX_DEPTH} deep")
    pos += 1
    label = ""
    if pos < len(tokens) and tokens[pos] not in "()":
        label = tokens[pos]
        pos += 1
    children: list[Union[Tree, str]] = []
    has_word = False
    while pos < len(tokens) and tokens[pos] != ")":
        if tokens[pos] == "(":
            child, pos = _parse_node(tokens, pos, where, depth + 1)
        else:
            child, pos, has_word = tokens[pos], pos + 1, True
        children.append(child)
    if pos >= len(tokens):
        raise TreeSyntaxError(f"{where}: unbalanced brackets (a bracket of {label or '(root)'!r} is never closed)")
    if has_word and len(children) > 1:
        raise TreeSyntaxError(f"{where}: bracket {label!r} holds a word beside other elements: "
                              f"{' '.join(str(c) for c in children)[:80]}")
    return Tree(label, children), pos + 1


def iter_trees(text: str, where: str = "<text>") -> Iterator[Tree]:
    """Yields every tree of bracketed text; trees may span lines and follow each other.

    Args:
        text: Penn Treebank text, e.g. the content of a `.mrg` file.
        where: name used in error messages (a file name).

    Raises:
        TreeSyntaxError: unbalanced brackets, a word outside any bracket, or a word beside others.
    """
    tokens = _tokenize(text)
    pos, number = 0, 1
    while pos < len(tokens):
        if tokens[pos] == ")":
            raise TreeSyntaxError(f"{where}: unbalanced brackets (an extra ')' after tree {number - 1})")
        if tokens[pos] != "(":
            raise TreeSyntaxError(f"{where}: expected '(' before tree {number} but found {tokens[pos]!r}")
        tree, pos = _parse_node(tokens, pos, f"{where} (tree {number})")
        number += 1
        yield tree


def parse_tree(line: str, where: str = "<text>") -> Tree:
    """Parses exactly one bracketed tree, e.g. one line of a gold file.

    Raises:
        TreeSyntaxError: the text holds no tree, several trees, or malformed brackets.
    """
    trees = list(iter_trees(line, where))
    if len(trees) != 1:
        raise TreeSyntaxError(f"{where}: expected one tree, found {len(trees)}")
    return trees[0]


def read_mrg(path: str | Path) -> list[Tree]:
    """Reads every tree of a Penn Treebank `.mrg` file (multi-line trees, outer unlabeled bracket).

    Raises:
        FileNotFoundError: `path` does not exist.
        TreeSyntaxError: the file is not bracketed trees; the message names the file.
    """
    path = Path(path)
    return list(iter_trees(read_text(path), str(path)))


def read_text(path: str | Path) -> str:
    """A file's text, UTF-8.

    Raises:
        OSError: it cannot be read.
        TreeSyntaxError: bytes that are not UTF-8; the message names the file, line and column.
    """
    data = Path(path).read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        column = error.start - data.rfind(b"\n", 0, error.start)
        raise TreeSyntaxError(f"{path}, line {line}, column {column}: not UTF-8 text (byte "
                              f"{data[error.start]:#04x})") from None


def strip_function_tags(label: str) -> str:
    """`NP-SBJ-1` -> `NP`, `PP-LOC=2` -> `PP`; labels starting with `-` (`-NONE-`, `-LRB-`) are kept."""
    if label.startswith("-"):
        return label
    return re.split(r"[-=]", label, maxsplit=1)[0]


def normalize(tree: Tree) -> Tree | None:
    """The standard normalisation for training and scoring (a new tree; the input is unchanged).

    Strips function tags and indices from phrase labels, removes `-NONE-` elements and every
    constituent left without words, and labels the root `TOP` (wrapping the tree in a `TOP` node
    when its root has another label).

    Returns:
        The normalised tree, or None when nothing but empty elements was left.
    """
    cleaned = _without_empty(tree)
    if cleaned is None:
        return None
    if cleaned.label in ("", ROOT_LABEL):
        return Tree(ROOT_LABEL, cleaned.children)
    return Tree(ROOT_LABEL, [cleaned])


def _without_empty(tree: Tree) -> Tree | None:
    if tree.is_preterminal:
        return None if tree.label == EMPTY_ELEMENT_TAG else Tree(tree.label, list(tree.children))
    children = [kept for child in tree.children if (kept := _without_empty(child)) is not None]
    if not children:
        return None
    return Tree(strip_function_tags(tree.label), children)
