"""Trees as token sequences, after Vinyals et al. 2015 ("Grammar as a Foreign Language", section 2).

The source is the words; the target is the tree's brackets in pre-order, each phrase opening as
`(LABEL` and closing as `)LABEL`, each word replaced by one slot token: `XX` (Vinyals et al.), its
POS tag, or the word itself (`SLOTS`):

    (TOP (S (NP (DT The) (NN cat)) (VP (VBZ sleeps)) (. .)))
    source: The cat sleeps .
    target: (S (NP XX XX )NP (VP XX )VP XX )S

The `TOP` root of a normalised tree is left out of the target when it has a single child.

`delinearize` turns any token sequence back into a well-formed tree over exactly the given words.
It reads the tokens left to right with a stack of open phrases and repairs, counting each kind:

1. `extra_closes`: a closing token with no open phrase is dropped.
2. `mismatched_closes`: a closing token whose label differs from the innermost open phrase still
   closes that phrase (which keeps its opening label).
3. `extra_slots`: a slot token after every word is placed is dropped.
4. `missing_slots`: words left over at the end are appended, as preterminals, to the root's last
   child when that is a phrase, else to the root (either way after every placed word).
5. `unclosed_opens`: phrases still open at the end are closed there.
6. `empty_constituents`: phrases that received no word are removed.
7. `dropped_tokens`: tokens that are neither slots nor brackets with a label (`(`, or a label
   holding a bracket: `((`, `(S(NP`, `)NP)`) are dropped; a bare `)` is not counted here but
   closes like any closing token.
8. `misspelt_slots`: when the slots are the words themselves (`--slots words`), they are first
   aligned with the input words (difflib's longest matching blocks, in order), so that a word
   the model wrote in two pieces, or skipped, shifts no other word: a slot aligned with another
   word still places that word and is counted here; a slot aligned with none is an `extra_slots`,
   and a word no slot took is a `missing_slots`, placed just before the next word a slot took, in
   the same phrase (or by rule 4 after the last one).

The result is always rooted in `TOP` with the words in order as its leaves.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from vtx.parsing.trees import ROOT_LABEL, Tree

# Slot token standing for one word when POS tags are not kept (Vinyals et al. 2015).
SLOT_TOKEN = "XX"
# What stands for each word in a target: XX, its POS tag, or the word itself. A decoder that
# writes the words (or their tags) must find each word in the source to continue, which gives a
# small model a strong signal to attend to it.
SLOTS = ("xx", "tags", "words")
# Part-of-speech tag given to words when the target names no tag (slot `XX`) and none is supplied.
DEFAULT_TAG = "XX"
# The Penn Treebank's part-of-speech tags: a slot token is taken as its word's tag only when it is
# one of these (tag slots; punctuation is its own tag), else the tag is XX.
PTB_TAGS = frozenset(
    "CC CD DT EX FW IN JJ JJR JJS LS MD NN NNS NNP NNPS PDT POS PRP PRP$ RB RBR RBS RP SYM TO UH "
    "VB VBD VBG VBN VBP VBZ WDT WP WP$ WRB # $ `` '' -LRB- -RRB- , . :".split())


@dataclasses.dataclass
class RepairStats:
    """How many repairs of each kind `delinearize` made (see the module docstring for the rules)."""

    extra_closes: int = 0
    mismatched_closes: int = 0
    extra_slots: int = 0
    missing_slots: int = 0
    unclosed_opens: int = 0
    empty_constituents: int = 0
    dropped_tokens: int = 0
    misspelt_slots: int = 0

    @property
    def total(self) -> int:
        """Number of repairs of every kind together."""
        return sum(dataclasses.astuple(self))

    def __add__(self, other: "RepairStats") -> "RepairStats":
        return RepairStats(*(a + b for a, b in zip(dataclasses.astuple(self), dataclasses.astuple(other))))


def is_bracket(piece: str) -> bool:
    """A linearized tree's bracket, `(X` or `)X`, also as a SentencePiece piece (`\u2581(NP`);
    a label X holds no bracket (`((`, `(S(NP` are none: no tree file could read them back)."""
    token = piece.removeprefix("\u2581")
    return len(token) > 1 and token[0] in "()" and "(" not in token[1:] and ")" not in token[1:]


def bracket_pairs(pieces: Sequence[str]) -> dict[int, int]:
    """The index of each opening bracket among `pieces` (a vocabulary's: `(X`, or `\u2581(X` as
    SentencePiece writes it) -> the index of its closing one, written alike; brackets without a
    partner left out."""
    index = {piece: i for i, piece in enumerate(pieces)}
    return {i: index[piece.replace("(", ")", 1)] for piece, i in index.items()
            if is_bracket(piece) and "(" in piece and piece.replace("(", ")", 1) in index}


def linearize(tree: Tree, slots: str = "xx") -> tuple[list[str], list[str]]:
    """Source words and target bracket tokens of a tree.

    Args:
        tree: a tree, normally from `trees.normalize`.
        slots: one of SLOTS: what stands for each word, `XX`, its POS tag or the word.

    Returns:
        (words, target): the N words, and the target tokens (N slots plus two per phrase).

    Raises:
        ValueError: unknown `slots`.
    """
    if slots not in SLOTS:
        raise ValueError(f"slots must be one of {', '.join(SLOTS)}, got {slots!r}")
    root = tree
    if root.label == ROOT_LABEL and len(root.children) == 1 and not root.is_preterminal:
        root = root.children[0]
    target: list[str] = []
    _linearize_into(root, slots, target)
    return root.leaves(), target


def _linearize_into(tree: Tree, slots: str, target: list[str]) -> None:
    if tree.is_preterminal:
        target.append({"xx": SLOT_TOKEN, "tags": tree.label, "words": tree.children[0]}[slots])
        return
    target.append("(" + tree.label)
    for child in tree.children:
        _linearize_into(child, slots, target)
    target.append(")" + tree.label)


def delinearize(target: Sequence[str], words: Sequence[str],
                tags: Sequence[str] | None = None) -> tuple[Tree, RepairStats]:
    """Rebuilds a well-formed tree over exactly `words` from (possibly broken) target tokens.

    Args:
        target: target tokens, e.g. a model's output split on spaces.
        words: the N source words, placed in order into the slots.
        tags: N POS tags for the preterminals; default: the slot token itself when it is a PTB
            tag (targets with tag slots), else `XX` (slots `XX`, or the words themselves).

    Returns:
        (tree, stats): a `TOP`-rooted tree whose leaves are `words`, and the repairs made.

    Raises:
        ValueError: `tags` is given with a length other than N.
    """
    if tags is not None and len(tags) != len(words):
        raise ValueError(f"{len(tags)} tags for {len(words)} words")
    stats = RepairStats()
    root = Tree(ROOT_LABEL)
    stack = [root]
    slots = [token for token in target if not token.startswith(("(", ")"))]
    aligned = iter(_align_word_slots(slots, words) if _are_words(slots) else
                   [i if i < len(words) else None for i in range(len(slots))])
    next_word = 0
    for token in target:
        if token.startswith("(") and is_bracket(token):
            phrase = Tree(token[1:])
            stack[-1].children.append(phrase)
            stack.append(phrase)
        elif token == ")" or token.startswith(")") and is_bracket(token):
            _close(stack, token[1:], stats)
        elif token.startswith(("(", ")")):  # no phrase label: `(` alone, `((`, `(S(NP`, `)NP)`
            stats.dropped_tokens += 1
        elif (index := next(aligned)) is None:
            stats.extra_slots += 1
        else:
            for skipped in range(next_word, index):  # words no slot took: after the last one
                tag = tags[skipped] if tags is not None else DEFAULT_TAG
                stack[-1].children.append(Tree(tag, [words[skipped]]))
                stats.missing_slots += 1
            tag = tags[index] if tags is not None else _slot_tag(token)
            stack[-1].children.append(Tree(tag, [words[index]]))
            stats.misspelt_slots += _are_words([token]) and token != words[index]
            next_word = index + 1
    stats.unclosed_opens += len(stack) - 1
    _place_missing_words(root, words, tags, next_word, stats)
    _remove_empty(root, stats)
    only = root.children[0] if len(root.children) == 1 else None
    if only is not None and not only.is_preterminal and only.label == ROOT_LABEL:
        root = only  # the target spelled out the root itself: (TOP ... )TOP
    return root, stats


def _are_words(slots: Sequence[str]) -> bool:
    """Whether slot tokens are words (`--slots words`) rather than XX or POS tags."""
    return any(slot != SLOT_TOKEN and slot not in PTB_TAGS for slot in slots)


def _align_word_slots(slots: Sequence[str], words: Sequence[str]) -> list[int | None]:
    """For each slot, the index of the word it stands for (increasing), or None for a slot that
    stands for no word: difflib's matching blocks, and position by position between them."""
    import difflib

    aligned: list[int | None] = []
    matcher = difflib.SequenceMatcher(None, list(slots), list(words), autojunk=False)
    for _, slot_start, slot_end, word_start, word_end in matcher.get_opcodes():
        paired = min(slot_end - slot_start, word_end - word_start)
        aligned += [word_start + offset for offset in range(paired)]
        aligned += [None] * (slot_end - slot_start - paired)
    return aligned


def _slot_tag(token: str) -> str:
    """The POS tag a slot token gives its word: the token when it is a PTB tag, else XX."""
    return token if token in PTB_TAGS else DEFAULT_TAG


def _close(stack: list[Tree], label: str, stats: RepairStats) -> None:
    if len(stack) == 1:
        stats.extra_closes += 1
        return
    if label and stack[-1].label != label:
        stats.mismatched_closes += 1
    stack.pop()


def _place_missing_words(root: Tree, words: Sequence[str], tags: Sequence[str] | None,
                         next_word: int, stats: RepairStats) -> None:
    """Appends words no slot took to the root's last child if it is a phrase, else to the root.

    Either host ends at the last placed word, so the words stay in order.
    """
    if next_word == len(words):
        return
    last = root.children[-1] if root.children else None
    host = last if last is not None and not last.is_preterminal else root
    for index in range(next_word, len(words)):
        tag = tags[index] if tags is not None else DEFAULT_TAG
        host.children.append(Tree(tag, [words[index]]))
    stats.missing_slots += len(words) - next_word


def _remove_empty(tree: Tree, stats: RepairStats) -> None:
    """Drops, bottom-up, every phrase without a word below it."""
    kept: list[Tree] = []
    for child in tree.children:
        if not child.is_preterminal:
            _remove_empty(child, stats)
            if not child.children:
                stats.empty_constituents += 1
                continue
        kept.append(child)
    tree.children = kept
