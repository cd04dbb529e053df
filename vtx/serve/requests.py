"""A request's JSON body, checked field by field, into a `Job` for the batcher.

Every refusal is a `RequestError`: an HTTP status and one line naming the field and the value
(malformed JSON, an unknown field, a wrong type, a line over the length limit, a beam or n-best
over the server's limit, too many lines). Nothing in a request names a file on the server.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Callable

from vtx.errors import ArgumentError, DataError
from vtx.inference.decoding import DecodeOptions, SamplingOptions
from vtx.inference.glossary import Glossary


class RequestError(Exception):
    """A request refused: `status` (4xx, or 503) and a one-line reason."""

    def __init__(self, message: str, status: int = 400, headers: dict | None = None):
        super().__init__(message)
        self.status, self.headers = status, headers or {}


@dataclasses.dataclass(frozen=True)
class Limits:
    """What one request may ask of the server (`vtx serve`'s --max-* flags)."""

    max_beam: int = 16  # beam and nbest (or samples) a request may ask for
    max_lines: int = 64  # lines a request
    max_line_tokens: int | None = None  # source pieces a line; None: the model's positions
    max_queue: int = 1024  # lines waiting for the search; more: 503 with Retry-After
    batch_wait_ms: float = 5.0  # how long a line waits for others to share its batch

    def __post_init__(self) -> None:
        for name in ("max_beam", "max_lines", "max_line_tokens", "max_queue"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ArgumentError("{" + name + "} must be >= 1, got {value}",
                                    value=getattr(self, name))
        if not (math.isfinite(self.batch_wait_ms) and self.batch_wait_ms >= 0):
            raise ArgumentError("{batch_wait_ms} must be finite and >= 0, got {value}",
                                value=self.batch_wait_ms)


@dataclasses.dataclass(frozen=True)
class Job:
    """A request's lines and how to search them: the unit the batcher queues."""

    options: DecodeOptions  # jobs of equal options share batches
    lines: list[str]
    tokens: int  # source pieces of all its lines (the batcher's --max-tokens accounting)
    prefixes: list[str] | None = None  # with options.prefix: a target prefix per line
    constraints: list[list[str]] | None = None  # with options.constraints: phrases per line


# The request's fields -> their JSON type's name, as a refusal says it.
TRANSLATE_FIELDS = {"text": "a list of strings", "beam": "an integer", "nbest": "an integer",
                    "lenpen": "a number", "sampling": "a boolean", "sampling_topk": "an integer",
                    "sampling_topp": "a number", "temperature": "a number", "seed": "an integer",
                    "prefix": "a list of strings", "constraints": "a list of lists of strings",
                    "alignment": "a boolean", "glossary": "a list of [source, target] pairs"}
PARSE_FIELDS = {"text": "a list of strings", "beam": "an integer", "lenpen": "a number"}
SAMPLING_FIELDS = ("sampling_topk", "sampling_topp", "temperature", "seed")


def read_body(body: bytes, fields: dict[str, str]) -> dict:
    """The JSON object of a request's body, its fields among `fields` and of their types.

    Raises:
        RequestError: malformed JSON, not an object, an unknown field or a value of the wrong
            type (naming the field and the value).
    """
    try:
        data = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise RequestError(f"malformed JSON: {error}") from None
    if not isinstance(data, dict):
        raise RequestError(f"the body must be a JSON object, got {_shown(data)}")
    for name, value in data.items():
        if name not in fields:
            raise RequestError(f"unknown field {name!r}; the fields are: {', '.join(fields)}")
        if not _of_type(value, fields[name]):
            raise RequestError(f"field {name!r}: expected {fields[name]}, got {_shown(value)}")
    if "text" not in data:
        raise RequestError("field 'text' is missing: give the lines to translate, a list of "
                           "strings")
    return data


def _of_type(value, kind: str) -> bool:
    """Whether `value` is a JSON value of `kind` (a bool is no integer, nor a number)."""
    strings = lambda x: isinstance(x, list) and all(isinstance(s, str) for s in x)
    return {"an integer": lambda: isinstance(value, int) and not isinstance(value, bool),
            "a number": lambda: (isinstance(value, (int, float)) and not isinstance(value, bool)
                               and math.isfinite(value)),
            "a boolean": lambda: isinstance(value, bool),
            "a list of strings": lambda: strings(value),
            "a list of lists of strings": lambda: isinstance(value, list)
            and all(strings(x) for x in value),
            "a list of [source, target] pairs": lambda: isinstance(value, list)
            and all(strings(x) and len(x) == 2 for x in value)}[kind]()


def _shown(value, limit: int = 60) -> str:
    """A value as JSON, cut to `limit` characters (a refusal stays one short line)."""
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[:limit] + "..."


def check_lines(lines: list[str], limits: Limits, count_pieces: Callable[[str], int]) -> int:
    """The source pieces of `lines`, each line checked against the limits.

    Raises:
        RequestError: too many lines, a line holding a line break, or one over the length limit.
    """
    if len(lines) > limits.max_lines:
        raise RequestError(f"field 'text': {len(lines)} lines, over the server's limit of "
                           f"{limits.max_lines} a request (--max-lines)")
    total = 0
    for index, line in enumerate(lines):
        if "\n" in line or "\r" in line:
            raise RequestError(f"field 'text[{index}]': {_shown(line)} holds a line break; give "
                               f"each line as its own string")
        pieces = count_pieces(line)
        if pieces > limits.max_line_tokens:
            raise RequestError(f"field 'text[{index}]': {pieces} source pieces, over the "
                               f"server's limit of {limits.max_line_tokens} a line "
                               f"(--max-line-tokens)")
        total += pieces
    return total


def per_line(data: dict, name: str, count: int) -> list | None:
    """A field of one entry per line (prefix, constraints), checked to have `count` of them."""
    if name not in data:
        return None
    if len(data[name]) != count:
        raise RequestError(f"field {name!r}: {len(data[name])} entries for {count} lines of "
                           f"'text'; give one per line")
    return data[name]


def decode_options(data: dict, defaults: DecodeOptions, limits: Limits,
                   alignment_layer: int, constraints: bool = False) -> DecodeOptions:
    """The search settings of a request: the server's `defaults` with the request's fields;
    `constraints`: some line has constraint phrases.

    Raises:
        RequestError: a beam or nbest over the limit, a sampling field without sampling (or the
            beam with it), or values the search refuses (naming the fields).
    """
    for name in ("beam", "nbest"):
        if name in data and data[name] > limits.max_beam:
            raise RequestError(f"field {name!r}: {data[name]}, over the server's limit of "
                               f"{limits.max_beam} (--max-beam)")
    sampling = data.get("sampling", False)
    for name in SAMPLING_FIELDS:
        if name in data and not sampling:
            raise RequestError(f"field {name!r} needs 'sampling': true")
    if sampling and "beam" in data:
        raise RequestError("field 'beam' has no use with 'sampling': true (it draws 'nbest' "
                           "samples)")
    try:
        sampler = SamplingOptions(**{field.removeprefix("sampling_"): data[field]
                                     for field in SAMPLING_FIELDS if field in data}) \
            if sampling else None
        return dataclasses.replace(
            defaults, beam=data.get("beam", defaults.beam),
            nbest=data.get("nbest", defaults.nbest), lenpen=data.get("lenpen", defaults.lenpen),
            sampling=sampler, positional_scores=True, prefix="prefix" in data,
            constraints=constraints,
            # The constrained search runs its steps from the host (`DecodeOptions`).
            jit_compile=defaults.jit_compile and not constraints,
            alignment_layer=alignment_layer if data.get("alignment") else None)
    except ArgumentError as error:
        raise RequestError(error.message(lambda argument: repr(argument))) from None


def translate_job(body: bytes, defaults: DecodeOptions, limits: Limits, alignment_layer: int,
                  count_pieces: Callable[[str], int], glossary: Glossary | None = None,
                  constrain: Callable[[Glossary, list[str], list[list[str]] | None],
                                      list[list[str]]] | None = None) -> Job:
    """The job of a POST /v1/translate body (`TRANSLATE_FIELDS`). With the server's `glossary`
    or the request's own (whose pairs win), `constrain(glossary, lines, given constraints)`
    gives each line's phrases (`vtx.inference.glossary.line_constraints`).

    Raises:
        RequestError: see `read_body`, `check_lines`, `decode_options`; a bad glossary pair.
    """
    data = read_body(body, TRANSLATE_FIELDS)
    lines = data["text"]
    tokens = check_lines(lines, limits, count_pieces)
    constraints = per_line(data, "constraints", len(lines))
    for index, phrases in enumerate(constraints or []):
        for phrase in phrases:
            if not count_pieces(phrase):
                raise RequestError(f"field 'constraints[{index}]': the phrase {_shown(phrase)} "
                                   f"encodes to no pieces")
    if "glossary" in data:
        try:
            own = Glossary.from_pairs(data["glossary"], lambda index: f"field 'glossary[{index}]'")
            own.check_targets(count_pieces, "field 'glossary'")
        except DataError as error:
            raise RequestError(str(error)) from None
        glossary = glossary.updated(own) if glossary is not None else own
    if glossary is not None and constrain is not None:
        constraints = constrain(glossary, lines, constraints)
    options = decode_options(data, defaults, limits, alignment_layer,
                             constraints=any(constraints or []))
    return Job(options, lines, tokens, per_line(data, "prefix", len(lines)),
               constraints if options.constraints else None)


def parse_job(body: bytes, defaults: DecodeOptions, limits: Limits,
              count_pieces: Callable[[str], int]) -> Job:
    """The job of a POST /v1/parse body (`PARSE_FIELDS`): whitespace-tokenized sentences.

    Raises:
        RequestError: see `read_body`, `check_lines`, `decode_options`.
    """
    data = read_body(body, PARSE_FIELDS)
    tokens = check_lines(data["text"], limits, count_pieces)
    options = decode_options(data, dataclasses.replace(defaults, nbest=1), limits, 0)
    return Job(dataclasses.replace(options, positional_scores=False), data["text"], tokens)
