"""A request's JSON body, checked field by field, into a `Job` for the batcher.

Every refusal is a `RequestError`: an HTTP status and one line naming the field and the value,
cut to ~80 characters (malformed JSON, an unknown field, a wrong type, text that is no UTF-8, a
line over a length limit, too many constraint phrases or glossary pairs, a beam or n-best over
the server's limit, too many lines, a request whose search would cost more than the server
takes at once). The checks run from the cheapest up: characters and counts before any line is
cut into pieces. Nothing in a request names a file on the server.

A request's cost is the work its search may take: for each line, the hypotheses searched at once
(the beam, or the samples) times the most tokens its output may hold (`DecodeOptions.
length_limit`); the queue and each request are bounded by it (`Limits`).
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Callable, Sequence

from vtx.errors import ArgumentError, DataError
from vtx.inference.decoding import DecodeOptions, SamplingOptions
from vtx.inference.glossary import Glossary
from vtx.serve.spec import Field

SHOWN = 80  # characters of an offending value a refusal quotes


class RequestError(Exception):
    """A request refused: `status` (4xx, or 503) and a one-line reason."""

    def __init__(self, message: str, status: int = 400, headers: dict | None = None):
        super().__init__(message)
        self.status, self.headers = status, headers or {}


@dataclasses.dataclass(frozen=True)
class Limits:
    """What one request may ask of the server, and what may wait (`vtx serve`'s --max-* flags).
    Each bounds a request's memory or time before its search is queued."""

    max_beam: int = 16  # beam and nbest (or samples) a request may ask for
    max_lines: int = 64  # lines a request
    max_line_tokens: int | None = None  # source pieces a line; None: the model's positions
    max_line_chars: int = 10_000  # characters a line (and a prefix or constraint phrase)
    max_constraints: int = 32  # constraint phrases a line (given and from glossaries)
    max_glossary_pairs: int = 1000  # pairs of a request's own glossary
    max_term_chars: int = 256  # characters of a glossary term
    max_html_tags: int = 10_000  # markup ('<') of a request's html texts together
    # The cost a request may have; None: that of --max-lines lines of --max-line-tokens pieces
    # searched with the server's default beam.
    max_request_cost: int | None = None
    max_queue: int = 1024  # lines waiting for the search; more: 503 with Retry-After
    max_queue_cost: int | None = None  # the cost waiting; None: 16 requests of the most cost
    batch_wait_ms: float = 5.0  # how long a line waits for others to share its batch
    search_threads: int = 2  # turns searched at once (`batcher.Batcher`'s searchers)
    request_timeout_s: float = 60.0  # a request not answered by then gets 504, its search stops

    def __post_init__(self) -> None:
        for name in ("max_beam", "max_lines", "max_line_tokens", "max_line_chars",
                     "max_constraints", "max_glossary_pairs", "max_term_chars",
                     "max_html_tags", "max_request_cost", "max_queue", "max_queue_cost", "search_threads"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ArgumentError("{" + name + "} must be >= 1, got {value}",
                                    value=getattr(self, name))
        for name in ("batch_wait_ms", "request_timeout_s"):
            if not (math.isfinite(getattr(self, name)) and getattr(self, name) >= 0):
                raise ArgumentError("{" + name + "} must be finite and >= 0, got {value}",
                                    value=getattr(self, name))
        if self.request_timeout_s == 0:
            raise ArgumentError("{request_timeout_s} must be > 0, got 0")
        if self.max_lines > self.max_queue:
            raise ArgumentError("{max_lines} {lines} is over {max_queue} {queue}: a request of "
                                "that many lines could never wait in the queue",
                                lines=self.max_lines, queue=self.max_queue)

    def resolved(self, defaults: DecodeOptions, max_positions: int) -> "Limits":
        """These limits with every None given its value for a model of `max_positions` searched
        with `defaults`.

        Raises:
            ArgumentError: a line limit past the model's positions, or a request's cost over
                the queue's.
        """
        line_tokens = self.max_line_tokens if self.max_line_tokens is not None else max_positions
        if line_tokens > max_positions:
            raise ArgumentError("{max_line_tokens} {value} is over the model's {positions} "
                                "positions", value=line_tokens, positions=max_positions)
        request_cost = self.max_request_cost if self.max_request_cost is not None else (
            self.max_lines * defaults.rows_per_sentence
            * defaults.length_limit(line_tokens, max_positions))
        queue_cost = self.max_queue_cost if self.max_queue_cost is not None else 16 * request_cost
        if request_cost > queue_cost:
            raise ArgumentError("{max_request_cost} {cost} is over {max_queue_cost} {queue}: "
                                "such a request could never wait in the queue",
                                cost=request_cost, queue=queue_cost)
        return dataclasses.replace(self, max_line_tokens=line_tokens,
                                   max_request_cost=request_cost, max_queue_cost=queue_cost)


@dataclasses.dataclass(frozen=True)
class Job:
    """A request's lines and how to search them: the unit the batcher queues."""

    options: DecodeOptions  # jobs of equal options share batches
    lines: list[str]
    line_tokens: list[int]  # source pieces of each line (the batcher's --max-tokens accounting)
    line_costs: list[int]  # each line's cost (module docstring)
    prefixes: list[str] | None = None  # with options.prefix: a target prefix per line
    constraints: list[list[str]] | None = None  # with options.constraints: phrases per line
    ids: list[list[int]] | None = None  # each line's pieces, encoded once when checked

    @property
    def tokens(self) -> int:
        return sum(self.line_tokens)

    @property
    def cost(self) -> int:
        return sum(self.line_costs)


@dataclasses.dataclass(frozen=True)
class Model:
    """What checking a request needs of the server's model: its default search, its limits
    (`Limits.resolved`), the decoder layer "alignment" reads, a text's number of pieces, and
    the server's glossary with the function giving a line's phrases from a glossary
    (`vtx.inference.glossary.translator_constraints`)."""

    defaults: DecodeOptions
    limits: Limits
    max_positions: int
    encode: Callable[[str], list[int]]  # a target text's pieces (a phrase, a prefix)
    encode_source: Callable[[str], list[int]]  # a source line's pieces
    alignment_layer: int = -1
    glossary: Glossary | None = None
    constrain: Callable[[Glossary, list[str], list[list[str]] | None],
                        list[list[str]]] | None = None


# The fields of POST /v1/translate (beside the pair's, `vtx.serve.pairs.ROUTE_FIELDS`).
TEXT = Field("text", "a list of strings", "the lines, each a sentence", required=True,
             where="json")
TRANSLATE_FIELDS = (
    TEXT,
    Field("beam", "an integer", "beam size (default: --beam)", where="json"),
    Field("nbest", "an integer", "hypotheses a line (default: --nbest)", where="json"),
    Field("lenpen", "a number", "length penalty (default: --lenpen)", where="json"),
    Field("sampling", "a boolean", "draw nbest samples instead of the beam", where="json"),
    Field("sampling_topk", "an integer", "sample among the k likeliest tokens", where="json"),
    Field("sampling_topp", "a number", "sample among the tokens of this much probability",
          where="json"),
    Field("temperature", "a number", "the sampling temperature", where="json"),
    Field("seed", "an integer", "the sampling seed", where="json"),
    Field("prefix", "a list of strings", "a target prefix per line", where="json"),
    Field("constraints", "a list of lists of strings", "the phrases each line's output holds",
          where="json"),
    Field("alignment", "a boolean", "each hypothesis's source alignment", where="json"),
    Field("glossary", "a list of [source, target] pairs", "terms kept as given, over the "
          "server's --glossary", where="json"))
PARSE_FIELDS = (Field("text", "a list of strings", "whitespace-tokenized sentences",
                      required=True, where="json"),
                *(field for field in TRANSLATE_FIELDS if field.name in ("beam", "lenpen")))
SAMPLING_FIELDS = ("sampling_topk", "sampling_topp", "temperature", "seed")


def check_body(data: dict, fields: Sequence[Field], limits: Limits | None = None) -> dict:
    """`data`, a request's JSON object, its fields among `fields` and of their kinds, every
    string of it UTF-8 (no lone surrogate); with `limits`, its lists' lengths checked first
    (`check_counts`), so that a list too long costs no look at its items.

    Raises:
        RequestError: an unknown field, a list too long, a value of the wrong type or a
            string that is no UTF-8 (naming the field and the value), a required field
            missing.
    """
    kinds = {field.name: field.kind for field in fields}
    for name in data:
        if name not in kinds:
            quoted = repr(name[:SHOWN]) + ("..." if len(name) > SHOWN else "")
            raise RequestError(f"unknown field {quoted}; the fields are: "
                               f"{', '.join(kinds)}")
    if limits is not None:
        check_counts(data, limits)
    for name, value in data.items():
        check_field(name, value, kinds[name])
    for field in fields:
        if field.required and field.name not in data:
            raise RequestError(f"field {field.name!r} is missing: give {field.description}, "
                               f"{field.kind}")
    return data


def check_counts(data: dict, limits: Limits) -> None:
    """Refuse more lines (or prefixes, or lines of constraints) than --max-lines, more phrases
    a line than --max-constraints, or more glossary pairs than --max-glossary-pairs.

    Raises:
        RequestError: naming the field, the count and the flag.
    """
    bounds = {"text": (limits.max_lines, "lines", "a request (--max-lines)"),
              "prefix": (limits.max_lines, "entries", "a request (--max-lines)"),
              "constraints": (limits.max_lines, "entries", "a request (--max-lines)"),
              "glossary": (limits.max_glossary_pairs, "pairs", "(--max-glossary-pairs)")}
    for name, (limit, what, flag) in bounds.items():
        if isinstance(data.get(name), list) and len(data[name]) > limit:
            raise RequestError(f"field {name!r}: {len(data[name])} {what}, over the server's "
                               f"limit of {limit} {flag}")
    constraints = data.get("constraints")
    for index, phrases in enumerate(constraints if isinstance(constraints, list) else []):
        if isinstance(phrases, list) and len(phrases) > limits.max_constraints:
            raise RequestError(f"field 'constraints[{index}]': {len(phrases)} phrases, over the "
                               f"server's limit of {limits.max_constraints} a line "
                               f"(--max-constraints)")


def read_json_object(body: bytes) -> dict:
    """The JSON object of a request's body.

    Raises:
        RequestError: malformed JSON (also nested too deep, or an integer of too many digits),
            or not an object.
    """
    try:
        data = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise RequestError(f"malformed JSON: {cut(str(error))}") from None
    except RecursionError:
        raise RequestError("malformed JSON: nested too deep") from None
    except ValueError as error:  # an integer past Python's digit limit
        raise RequestError(f"malformed JSON: {cut(str(error))}") from None
    if not isinstance(data, dict):
        raise RequestError(f"the body must be a JSON object, got {shown(data)}")
    return data


def check_field(name: str, value, kind: str) -> None:
    """Refuse a field's JSON value that is not of `kind` (a type's name, `vtx.serve.spec.SCHEMAS`)
    or holds a string that is no UTF-8.

    Raises:
        RequestError: naming the field and the value.
    """
    if not _of_type(value, kind):
        raise RequestError(f"field {name!r}: expected {kind}, got {shown(value)}")
    _check_text(value, name)


def _check_text(value, where: str) -> None:
    """Refuse a string of `value` (a JSON value) that UTF-8 cannot hold: a lone surrogate."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as error:
            raise RequestError(f"field {where!r}: {shown(value)} holds "
                               f"{value[error.start]!r} at character {error.start}, a lone "
                               f"surrogate, which is no Unicode text") from None
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _check_text(item, f"{where}[{index}]")


def _of_type(value, kind: str) -> bool:
    """Whether `value` is a JSON value of `kind` (a bool is no integer, nor a number)."""
    strings = lambda x: isinstance(x, list) and all(isinstance(s, str) for s in x)
    return {"an integer": lambda: isinstance(value, int) and not isinstance(value, bool),
            "a number": lambda: (isinstance(value, (int, float)) and not isinstance(value, bool)
                               and math.isfinite(value)),
            "a boolean": lambda: isinstance(value, bool),
            "a string": lambda: isinstance(value, str),
            "a string or a list of strings": lambda: isinstance(value, str) or strings(value),
            "a list of strings": lambda: strings(value),
            "a list of lists of strings": lambda: isinstance(value, list)
            and all(strings(x) for x in value),
            "a list of [source, target] pairs": lambda: isinstance(value, list)
            and all(strings(x) and len(x) == 2 for x in value)}[kind]()


def cut(text: str, limit: int = SHOWN) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def shown(value, limit: int = SHOWN) -> str:
    """A value as JSON, cut to `limit` characters (a refusal stays one short line)."""
    if isinstance(value, str):
        value = value[:limit + 1]  # no need to write out a long string to cut it
    elif isinstance(value, (list, dict)) and len(value) > limit:
        value = value[:limit] if isinstance(value, list) else dict(list(value.items())[:limit])
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (ValueError, RecursionError):  # past the digit limit, or nested deep
        text = repr(type(value).__name__)
    return cut(text, limit)


def check_lines(lines: list[str], limits: Limits, field: str = "text") -> None:
    """Refuse too many lines, a line holding a line break, or one of too many characters.

    Raises:
        RequestError: naming the field (`field[i]`), the value and the flag.
    """
    if len(lines) > limits.max_lines:
        raise RequestError(f"field {field!r}: {len(lines)} lines, over the server's limit of "
                           f"{limits.max_lines} a request (--max-lines)")
    for index, line in enumerate(lines):
        check_chars(line, limits.max_line_chars, f"{field}[{index}]", "--max-line-chars")
        if "\n" in line or "\r" in line:
            raise RequestError(f"field '{field}[{index}]': {shown(line)} holds a line break; "
                               f"give each line as its own string")


def check_chars(text: str, limit: int, where: str, flag: str) -> None:
    """Refuse `text` (of the field `where`) of more characters than `limit` (`flag`'s)."""
    if len(text) > limit:
        raise RequestError(f"field {where!r}: {len(text)} characters ({shown(text, 40)}), "
                           f"over the server's limit of {limit} ({flag})")


def encode_lines(lines: list[str], limits: Limits, encode: Callable[[str], list[int]],
                 field: str = "text") -> list[list[int]]:
    """The source pieces of each line, each checked against --max-line-tokens.

    Raises:
        RequestError: a line over the limit (naming `field[i]`).
    """
    encoded = []
    for index, line in enumerate(lines):
        ids = encode(line)
        if len(ids) > limits.max_line_tokens:
            raise RequestError(f"field '{field}[{index}]': {len(ids)} source pieces, over the "
                               f"server's limit of {limits.max_line_tokens} a line "
                               f"(--max-line-tokens)")
        encoded.append(ids)
    return encoded


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
    except (ArgumentError, OverflowError) as error:  # OverflowError: a seed past 64 bits
        message = error.message(lambda argument: repr(argument)) \
            if isinstance(error, ArgumentError) else str(error)
        raise RequestError(cut(message, 4 * SHOWN)) from None


def _check_phrases(data: dict, limits: Limits, count: int) -> None:
    """Refuse more constraint phrases a line than --max-constraints, a phrase or prefix over
    --max-line-chars, a request glossary of more pairs than --max-glossary-pairs or a term
    longer than --max-term-chars (before any is cut into pieces)."""
    for index, phrases in enumerate(per_line(data, "constraints", count) or []):
        if len(phrases) > limits.max_constraints:
            raise RequestError(f"field 'constraints[{index}]': {len(phrases)} phrases, over the "
                               f"server's limit of {limits.max_constraints} a line "
                               f"(--max-constraints)")
        for phrase in phrases:
            check_chars(phrase, limits.max_line_chars, f"constraints[{index}]",
                         "--max-line-chars")
    for index, prefix in enumerate(per_line(data, "prefix", count) or []):
        check_chars(prefix, limits.max_line_chars, f"prefix[{index}]", "--max-line-chars")
    pairs = data.get("glossary", [])
    if len(pairs) > limits.max_glossary_pairs:
        raise RequestError(f"field 'glossary': {len(pairs)} pairs, over the server's limit of "
                           f"{limits.max_glossary_pairs} (--max-glossary-pairs)")
    for index, pair in enumerate(pairs):
        for term in pair:
            check_chars(term, limits.max_term_chars, f"glossary[{index}]", "--max-term-chars")


def _fit_phrases(phrases: list[list[str]] | None, prefixes: list[str] | None,
                 tokens: list[int], options: DecodeOptions, model: Model) -> None:
    """Refuse a line whose given phrases (each of some pieces) or prefix, with EOS, exceed its
    output's length limit: no hypothesis could hold them."""
    for index, pieces in enumerate(tokens):
        limit = options.length_limit(pieces, model.max_positions)
        counts = [len(model.encode(phrase)) for phrase in (phrases or [[]] * len(tokens))[index]]
        if 0 in counts:
            phrase = phrases[index][counts.index(0)]
            raise RequestError(f"field 'constraints[{index}]': the phrase {shown(phrase)} "
                               f"encodes to no pieces")
        if sum(counts) + 1 > limit:
            raise RequestError(f"field 'constraints[{index}]': {sum(counts)} pieces of "
                               f"phrases, but the output of that line holds at most {limit} "
                               f"tokens with EOS")
        if prefixes is not None and (length := len(model.encode(prefixes[index]))) >= limit:
            raise RequestError(f"field 'prefix[{index}]': {length} pieces, but the output of "
                               f"that line holds at most {limit} tokens with EOS")


def _costs(tokens: list[int], options: DecodeOptions, model: Model) -> list[int]:
    """Each line's cost (module docstring), the request's checked against --max-request-cost.

    Raises:
        RequestError: the request's cost is over the limit (saying what lowers it).
    """
    costs = [options.rows_per_sentence * options.length_limit(pieces, model.max_positions)
             if pieces else 0 for pieces in tokens]  # a line of no pieces is not searched
    if sum(costs) > model.limits.max_request_cost:
        raise RequestError(f"the request's search may take {sum(costs)} hypothesis tokens "
                           f"({len(tokens)} lines, {options.rows_per_sentence} hypotheses "
                           f"each, up to their output limits), over the server's limit of "
                           f"{model.limits.max_request_cost} a request (--max-request-cost); "
                           f"send fewer or shorter lines, or a smaller beam")
    return costs


def job_of(data: dict, model: Model, field: str = "text") -> Job:
    """The job of a translate request's fields (`TRANSLATE_FIELDS`, each of its kind), its
    lines in `data["text"]`, which a refusal names `field`. With the server's glossary or the
    request's own (whose pairs win), `model.constrain` gives each line's phrases.

    Raises:
        RequestError: see `check_lines`, `decode_options`, `_check_phrases`, `encode_lines`,
            `_fit_phrases`, `_costs`; a bad glossary pair.
    """
    lines, limits = data["text"], model.limits
    check_lines(lines, limits, field)
    _check_phrases(data, limits, len(lines))
    # The settings refused before any line is cut into pieces (those of a constrained search
    # are the same but for its own flag).
    options = decode_options(data, model.defaults, limits, model.alignment_layer)
    ids = encode_lines(lines, limits, model.encode_source, field)
    tokens = [len(line) for line in ids]
    constraints = per_line(data, "constraints", len(lines))
    prefixes = per_line(data, "prefix", len(lines))
    _fit_phrases(constraints, prefixes, tokens, options, model)
    glossary = model.glossary
    if "glossary" in data:
        try:
            own = Glossary.from_pairs(data["glossary"], lambda index: f"field 'glossary[{index}]'")
            own.check_targets(lambda text: len(model.encode(text)), "field 'glossary'")
        except DataError as error:
            raise RequestError(cut(str(error), 4 * SHOWN)) from None
        glossary = glossary.updated(own) if glossary is not None else own
    if glossary is not None and model.constrain is not None:
        constraints = model.constrain(glossary, lines, constraints)
        for index, phrases in enumerate(constraints):
            if len(phrases) > limits.max_constraints:
                raise RequestError(f"field '{field}[{index}]': the glossary's terms found in it "
                                   f"and its constraints make {len(phrases)} phrases, over the "
                                   f"server's limit of {limits.max_constraints} a line "
                                   f"(--max-constraints)")
    if any(constraints or []):
        options = decode_options(data, model.defaults, limits, model.alignment_layer,
                                 constraints=True)
    return Job(options, lines, tokens, _costs(tokens, options, model), prefixes,
               constraints if options.constraints else None, ids)


def parse_job(data: dict, model: Model) -> Job:
    """The job of a POST /v1/parse body's JSON object (`PARSE_FIELDS`): whitespace-tokenized
    sentences.

    Raises:
        RequestError: see `check_body`, `check_lines`, `decode_options`, `encode_lines`,
            `_costs`.
    """
    data = check_body(data, PARSE_FIELDS, model.limits)
    check_lines(data["text"], model.limits)
    options = decode_options(data, dataclasses.replace(model.defaults, nbest=1), model.limits, 0)
    options = dataclasses.replace(options, positional_scores=False)
    ids = encode_lines(data["text"], model.limits, model.encode_source)
    tokens = [len(line) for line in ids]
    return Job(options, data["text"], tokens, _costs(tokens, options, model), ids=ids)
