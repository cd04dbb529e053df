"""vtx's exception classes, each raised where its docstring says; errors about a bad argument,
worded for whoever passed it; and which TensorFlow errors mean the device's memory ran out.

This module imports nothing of vtx, so that any module may raise or catch its errors.

A library function names its own arguments (`beam`, `gold`); a command names the flags it maps
them from (`--beam`, `--gold`). An `ArgumentError` keeps its message as a template so that either
can be written from it, and a command never rewrites the library's words.
"""

from __future__ import annotations

import re
import string
from typing import Callable


class Templated:
    """A message kept as a `str.format` template whose fields are either a library function's
    argument names (`{beam}`), written as `message`'s `name` says, or keys of `values`."""

    def __init__(self, template: str, **values) -> None:
        self.template, self.values = template, values
        super().__init__(self.message(lambda argument: argument))

    @property
    def arguments(self) -> list[str]:
        """The argument names the message mentions, in order."""
        fields = (field for _, field, _, _ in string.Formatter().parse(self.template) if field)
        return [field for field in dict.fromkeys(fields) if field not in self.values]

    def message(self, name: Callable[[str], str]) -> str:
        """The message with each argument written as `name(argument)` (e.g. its flag)."""
        return self.template.format(**{a: name(a) for a in self.arguments}, **self.values)


class ArgumentError(Templated, ValueError):
    """A bad value of a library function's argument.

    Args:
        template: the message, a `str.format` template whose fields are either argument names
            (`{beam}`), written as `name` says, or keys of `values`.
        values: the offending values and other figures, e.g. `path=...`.

    `str(error)` writes each argument by its library name.
    """


class FlagError(ValueError):
    """Flags that do not go together (each named): a command refuses them as a usage error."""


class DataError(ValueError):
    """Raised on bad input data; the message names the file (and line), or the setting and value."""


class ManifestError(DataError):
    """Raised when a directory vtx wrote does not match its manifest (`vtx.manifest`): a file
    changed, missing or added, or a symbolic link leaving it; or lacks a file its readers need,
    or holds one that does not parse. The message names the file."""


class VocabularyTooSmallError(DataError):
    """Raised when the vocabulary size is below the pieces SentencePiece needs for the text.

    Attributes:
        vocab_size: the size asked for.
        minimum: the smallest size SentencePiece accepts for this text: a piece for each
            character it covers, beside the special pieces and byte fallback's 256 bytes.
    """

    def __init__(self, vocab_size: int, minimum: int):
        super().__init__(f"vocab size {vocab_size} is too small for the characters of the "
                         f"text: SentencePiece needs at least {minimum} pieces")
        self.vocab_size, self.minimum = vocab_size, minimum


class CheckpointError(ValueError):
    """Raised when a checkpoint file is damaged (truncated, rewritten, bad checksum) or not one."""


class ArchitectureError(ValueError):
    """Raised when a file describes a model of another architecture than the one it is used with."""


class OutputExistsError(FileExistsError):
    """Raised when an output is an existing regular file and replacing it was not asked for."""


class OutputLockedError(Templated, OSError):
    """Raised when another process is writing the output a command would write
    (`vtx.locking`); the message names the output, its flag (or the library argument a command
    maps to its flag, as `ArgumentError`'s), the holder and the lock file."""


class LockFileError(OSError):
    """Raised when the path of an output's or a save dir's lock file (`vtx.locking`) holds
    something else: a symbolic link, a hard link, a file that is not a lock's; the message names
    the path."""


class TreeSyntaxError(ValueError):
    """Raised on bracketed text that is not a tree; the message says where."""


class TooManyErrors(ValueError):
    """Raised on more error sentences than EVALB tolerates (it exits without a summary)."""


class SearchInterrupted(Exception):
    """Raised when `Translator.search_ids` stops between two batches because its caller asks."""


class TrainingError(RuntimeError):
    """Raised when training cannot go on: non-finite losses in a row, out of memory, divergence,
    another worker gone, or a save dir that does not fit the run."""


# TensorFlow reports a full disk (ENOSPC) or quota (EDQUOT) as ResourceExhaustedError too.
_DISK_FULL = ("No space left on device", "Disk quota exceeded")


def disk_full(error: Exception) -> bool:
    """Whether TensorFlow's `error` is a full disk or quota."""
    return any(text in _message(error) for text in _DISK_FULL)


def out_of_device_memory(error: Exception) -> bool:
    """Whether TensorFlow's `error` is the device's memory running out: ResourceExhaustedError
    (but a full disk is reported so too), or an error of CUDA's own allocator, such as
    CUDA_ERROR_OUT_OF_MEMORY loading a compiled kernel, which TensorFlow raises as another kind
    (InternalError). Judged by the class's name, so that this module imports no TensorFlow."""
    if type(error).__name__ == "ResourceExhaustedError":
        return not disk_full(error)
    if not any(c.__name__ == "OpError" for c in type(error).__mro__):
        return False
    return "CUDA_ERROR_OUT_OF_MEMORY" in _message(error) or "out of memory" in _message(
        error).lower()


def _message(error: Exception) -> str:
    return getattr(error, "message", None) or str(error)


def tf_message(error: Exception, lines: int = 2) -> str:
    """TensorFlow's own words for `error`, on one line: without the "Graph execution error"
    header and the Python stack of the node that a tf.function's error carries, and without
    the graph's tags ({{node ...}}, {{function_node ...}}, [Op:...]); its first `lines` lines."""
    text = _message(error)
    text = re.sub(r"\{\{function_node [^}]*\}\}|\[\[\{\{node [^}]*\}\}\]\]|\[Op:[^\]]*\]", "", text)
    kept = text.splitlines()
    if kept and kept[0].startswith("Graph execution error"):
        # The header, "Detected at node X defined at (most recent call last):", then each
        # frame's "  File ..." line (and its code line) and blank lines; the words follow.
        frames = [i for i, line in enumerate(kept) if line.startswith("  File ")]
        kept = kept[frames[-1] + 1:] if frames else kept[1:]
        kept = [line for line in kept if not line.startswith("    ")]  # a frame's code line
    said = [line.strip() for line in kept if line.strip()
            and not line.startswith("Detected at node")]
    return " ".join(said[:lines]) or type(error).__name__
