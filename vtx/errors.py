"""Errors about a bad argument, worded for whoever passed it.

A library function names its own arguments (`beam`, `gold`); a command names the flags it maps
them from (`--beam`, `--gold`). An `ArgumentError` keeps its message as a template so that either
can be written from it, and a command never rewrites the library's words.
"""

from __future__ import annotations

import string
from typing import Callable


class ArgumentError(ValueError):
    """A bad value of a library function's argument.

    Args:
        template: the message, a `str.format` template whose fields are either argument names
            (`{beam}`), written as `name` says, or keys of `values`.
        values: the offending values and other figures, e.g. `path=...`.

    `str(error)` writes each argument by its library name.
    """

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
