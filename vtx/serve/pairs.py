"""The models one `vtx serve` holds, by language pair, and how a request finds its own.

Each pair is one model or an ensemble with its own search (its Translators and traced searches),
its own batcher and its own limits (`--max-queue` and the others count each pair's queue and
requests apart), so that a busy pair never holds another's lines back. The server's counters
(`Metrics`) are shared: they count every pair's requests and batches together, and each pair's
lines searched and waiting apart (`vtx_pair_*`).

A server of `--checkpoint` alone holds one model, of the languages --source-lang and
--target-lang name (or of none said); `--model en-de=PATH` (repeated) names each pair.
"""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path
from typing import Callable, Sequence

from vtx.errors import ArgumentError
from vtx.inference.decoding import DecodeOptions
from vtx.inference.glossary import Glossary, translator_constraints
from vtx.inference.translator import Compiled, Translator
from vtx.precision import DecodingPrecision
from vtx.serve.batcher import Batcher, Translators
from vtx.serve.language import LanguagePair, language_name, pair_of, served_code
from vtx.serve.metrics import Metrics
from vtx.serve.requests import Limits, Model, RequestError, check_field
from vtx.serve.spec import Field

# The fields of POST /v1/translate that choose its pair (`Pairs.find_fields`).
ROUTE_FIELDS = (
    Field("model", "a string", "the pair, e.g. en-de (with one model, optional)", where="json"),
    Field("source", "a string", "the source language (with target, instead of model)",
          where="json"),
    Field("target", "a string", "the target language", where="json"))


@dataclasses.dataclass
class Served:
    """One model (or ensemble) of the server: its first Translator (vocabulary, defaults), its
    batcher, its limits, and what /v1/info says of it."""

    translator: Translator
    batcher: Batcher
    counter: "PairCounter"  # its batcher's counts, into the server's
    limits: Limits  # resolved for this model's positions
    alignment_layer: int  # the decoder layer a request's "alignment" reads
    checkpoints: list[str]  # file names only: a reply names no server path
    parser: bool  # the vocabulary holds tree brackets: /v1/parse answers
    glossary: Glossary | None = None  # every request's, under the request's own pairs
    pair: LanguagePair | None = None  # its languages; None: not told

    @property
    def name(self) -> str:
        """The pair as `--model` and a request's "model" say it: "en-de"."""
        return self.pair.name if self.pair else ""

    def model(self) -> Model:
        """What checking a request needs (`vtx.serve.requests.Model`)."""
        return Model(self.translator.options, self.limits, self.translator.max_positions,
                     self.translator.vocab.encode, self.translator.vocab.encode_source,
                     self.alignment_layer, self.glossary,
                     self.constrain)

    def constrain(self, glossary: Glossary, lines: list[str],
                  given: list[list[str]] | None) -> list[list[str]]:
        """Each line's phrases with `glossary`'s terms, as `vtx translate` of the lines."""
        return translator_constraints(self.translator, glossary, lines, given,
                                      range(len(lines)))

    def info(self) -> dict:
        """This model's part of GET /v1/info."""
        options = self.translator.options
        settings = {name: getattr(options, name) for name in (
            "beam", "nbest", "lenpen", "lenpen_formula", "max_len_a", "max_len_b", "stop",
            "max_tokens", "jit_compile")}
        return {"pair": self.name or None,
                "model": {"checkpoints": self.checkpoints, "ensemble": len(self.checkpoints),
                          "parser": self.parser, "config": self.translator.model.config.to_dict(),
                          "languages": dataclasses.asdict(self.pair) if self.pair else None},
                "vocabulary": {"size": self.translator.vocab.size},
                "settings": {**settings, "alignment_layer": self.alignment_layer},
                "limits": dataclasses.asdict(self.limits)}


def load_served(paths: Sequence[str | Path], pair: LanguagePair | None, options: DecodeOptions,
                limits: Limits, metrics: Metrics, alignment_layer: int = -1, ema: bool = False,
                warn: Callable[[str], None] = lambda message: None,
                glossary: Glossary | None = None, named: str = "--checkpoint {}",
                log: Callable[[str], None] = lambda message: None,
                precision: DecodingPrecision = DecodingPrecision()) -> Served:
    """Load the model (or ensemble) of `paths` for `pair` with its own search and batcher;
    `log` is told what was loaded, its parameters, and the time and memory it took; `named`:
    how a refusal names a checkpoint (its flag and value); `precision`: the dtype policy and
    quantization the models are built in.

    Raises:
        OSError, ValueError: an unreadable checkpoint (named), or checkpoints of different
            vocabularies; limits over the model (a line limit past its positions), or a
            glossary target of no pieces.
    """
    from vtx.inference.loading import load_models, resolve_checkpoint
    from vtx.parsing.linearize import bracket_pairs

    started, resident = time.monotonic(), _resident_bytes()
    paths = [resolve_checkpoint(path, named) for path in paths]
    models, vocab = load_models(paths, ema, precision, named)
    # Positional scores as every request's (the fields of translate's jsonl).
    # Every kind of search a request can ask kept once traced (beam 1 to --max-beam, with or
    # without a prefix, plain or constrained; sampling): a trace dropped does not give its
    # memory back, so a cache that dropped some would grow with each one traced again.
    compiled = Compiled(models, size=4 * limits.max_beam + 2)
    translator = Translator(models, vocab, dataclasses.replace(options, positional_scores=True),
                            warn, compiled=compiled)
    translators = Translators(translator)
    # A layer the model lacks is refused now, not at a request's search.
    translators.get(dataclasses.replace(translator.options, alignment_layer=alignment_layer))
    limits = limits.resolved(translator.options, translator.max_positions)
    counter = PairCounter(metrics)
    batcher = Batcher(translators, options.max_tokens, limits.batch_wait_ms / 1000,
                      limits.max_queue, counter, max_queue_cost=limits.max_queue_cost,
                      turn_rows=options.max_tokens * options.rows_per_sentence,
                      searchers=limits.search_threads)
    parser = bool(bracket_pairs(vocab.pieces(range(vocab.size))))
    served = Served(translator, batcher, counter, limits, alignment_layer,
                    [p.name for p in paths], parser, glossary, pair)
    parameters = sum(model.count_params() for model in models)
    grown = _resident_bytes() - resident if resident else None
    log(f"vtx serve: {served.name or 'the model'}: {len(paths)} checkpoint"
        f"{'s' if len(paths) > 1 else ''} ({', '.join(served.checkpoints)}), {parameters:,} "
        f"parameters, {vocab.size} pieces; loaded in {time.monotonic() - started:.1f} s"
        + (f", {grown / 2**20:+.0f} MiB resident" if grown is not None else ""))
    return served


class PairCounter:
    """What a pair's batcher counts (as it counts into a `Metrics`): told to the server's
    `metrics`, and its lines searched kept apart."""

    def __init__(self, metrics: Metrics):
        self.metrics, self.lines = metrics, 0
        self.search_traces: Callable[[], int] = lambda: 0  # the batcher's, summed by the server

    def observe_batch(self, lines: int, source_tokens: int, output_tokens: int,
                      seconds: float) -> None:
        self.metrics.observe_batch(lines, source_tokens, output_tokens, seconds)
        self.lines += lines  # the search's one thread writes it


def _resident_bytes() -> int:
    """This process's resident memory (Linux's /proc), or 0 where it cannot be read."""
    try:
        with open("/proc/self/statm") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


class Pairs:
    """The served models, and which one (or, through a middle language, which two: `chain`) a
    request's languages ask for."""

    def __init__(self, served: Sequence[Served], pivot: bool = True):
        self.served = list(served)
        self.pivot = pivot  # --pivot: two pairs that chain translate what neither does alone

    @property
    def first(self) -> Served:
        return self.served[0]

    def described(self) -> str:
        """Every pair, as a refusal lists them: "'en' (English) into 'de' (German), ..."."""
        return ", ".join(f"{s.pair.source!r} ({language_name(s.pair.source)}) into "
                         f"{s.pair.target!r} ({language_name(s.pair.target)})"
                         for s in self.served if s.pair)

    def languages(self) -> list[str]:
        """Every language served (sources first), each once."""
        codes = [s.pair.source for s in self.served if s.pair]
        codes += [s.pair.target for s in self.served if s.pair]
        return list(dict.fromkeys(codes))

    def code(self, code: str) -> str:
        """The served language a request's `code` names (`language.served_code`: without case,
        LibreTranslate's aliases such as zh-Hans for zh, a region dropped), else `code`."""
        return served_code(code, self.languages())

    def told(self) -> None:
        """Refuse a server not told its models' languages.

        Raises:
            RequestError: 404, naming the flags that tell them.
        """
        if self.first.pair is None:
            raise RequestError("this server was not told its model's languages: start it with "
                               "--source-lang and --target-lang (e.g. en and de), or --model "
                               "en-de=PATH, for the LibreTranslate routes", 404)

    def find(self, source: str, target: str, said: str | None = None) -> Served:
        """The model translating `source` into `target` (codes, compared without case);
        `said`: how a refusal names the source ("detected 'de' for source 'auto'").

        Raises:
            RequestError: 404, no languages told; 400, no such pair (the served ones listed).
        """
        self.told()
        source, target = self.code(source), self.code(target)
        for served in self.served:
            if (source, target) == (served.pair.source, served.pair.target):
                return served
        raise RequestError(f"{said or f'source {source!r}'} and target {target!r}: this server "
                           f"translates {self.described()} only")

    def chain(self, source: str, target: str) -> tuple[Served, Served] | None:
        """The two pairs that translate `source` into `target` (served codes) through a middle
        language, where no pair does it alone and pivots are on: the first pair from `source`
        (in --model order) whose target some pair translates into `target`. None: none."""
        if not self.pivot or any((s.pair.source, s.pair.target) == (source, target)
                                 for s in self.served if s.pair):
            return None
        for first in self.served:
            if first.pair and first.pair.source == source:
                for then in self.served:
                    if then.pair and (then.pair.source, then.pair.target) == (
                            first.pair.target, target):
                        return first, then
        return None

    def targets(self, source: str) -> tuple[list[str], dict[str, str]]:
        """The languages `source` translates into: those of its own pairs first, then those
        reached through a middle language (`chain`), and {target: middle} of the latter."""
        direct = [s.pair.target for s in self.served if s.pair and s.pair.source == source]
        middles = {}
        for code in self.languages():
            chained = self.chain(source, code) if code != source else None
            if chained and code not in direct:
                middles[code] = chained[0].pair.target
        return direct + list(middles), middles

    def find_fields(self, data: dict) -> Served:
        """The model a POST /v1/translate body asks for, by "model" ("en-de") or "source" and
        "target"; those fields are taken out of `data`. With one model they may be left out.

        Raises:
            RequestError: a field of the wrong type, "model" not a pair, "model" and
                "source"/"target" that disagree, no pair given to a server of several, or a
                pair not served.
        """
        fields = {field.name: data.pop(field.name) for field in ROUTE_FIELDS
                  if field.name in data}
        for field in ROUTE_FIELDS:
            if field.name in fields:
                check_field(field.name, fields[field.name], field.kind)
        if not fields and len(self.served) == 1:
            return self.first
        source, target = fields.get("source"), fields.get("target")
        if "model" in fields:
            try:
                pair = pair_of(fields["model"])
            except ArgumentError:
                raise RequestError(f"field 'model': {fields['model'][:80]!r} is no language "
                                   f"pair; give one of: {', '.join(self.names())}") from None
            if (source or pair.source) != pair.source or (target or pair.target) != pair.target:
                raise RequestError(f"field 'model' {fields['model']!r} and fields 'source', "
                                   f"'target' disagree; give one or the other")
            source, target = pair.source, pair.target
        if source is None or target is None:
            raise RequestError(f"this server translates several pairs: give field 'model' "
                               f"(one of {', '.join(self.names())}) or 'source' and 'target'")
        return self.find(source, target)

    def counts(self) -> dict[str, tuple[int, int]]:
        """Each pair's lines searched and waiting (`Metrics.by_pair`); none with one model."""
        if len(self.served) == 1:
            return {}
        return {s.name: (s.counter.lines, s.batcher.queued_lines()) for s in self.served}

    def names(self) -> list[str]:
        return [served.name for served in self.served]

    def parser(self) -> Served | None:
        """The parsing model, on a server of one model that parses."""
        return self.first if len(self.served) == 1 and self.first.parser else None
