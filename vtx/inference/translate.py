"""`vtx translate` as a library call: lines read, translated a buffer at a time by a
`Translator`, written back in input order as text, n-best lists or jsonl; BLEU against a
reference (paper section 6.1).
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import math
from pathlib import Path
from typing import Callable, Iterable, Sequence

from vtx.data.text import lines_in_file
from vtx.errors import ArgumentError
from vtx.inference.decoding import DecodeOptions
from vtx.inference.files import (STDIN, LineFile, check_output, open_source, output_sink,
                                 read_line_files, read_lines, read_references)
from vtx.inference.glossary import Glossary, translator_constraints
from vtx.inference.loading import load_models
from vtx.precision import DecodingPrecision
from vtx.inference.translator import Hypothesis, Translator
from vtx.progress_lines import LineProgress


def _finite(value: float) -> float | None:
    """JSON has no infinity nor nan: null stands for them."""
    return value if math.isfinite(value) else None


def json_record(translator: Translator, line_id: int, source: str,
                hypotheses: list[Hypothesis]) -> str:
    """One input line's jsonl record (`line_record`) as a line of JSON."""
    return json.dumps(line_record(translator, line_id, source, hypotheses), ensure_ascii=False)


def line_record(translator: Translator, line_id: int, source: str,
                hypotheses: list[Hypothesis]) -> dict:
    """One input line's record: its id (0 for the first line), its source, and per hypothesis
    its text, score, pieces and (when computed) positional scores and alignment."""
    records = []
    for hypothesis in hypotheses:
        record = {"text": hypothesis.text, "score": _finite(hypothesis.score),
                  "tokens": translator.vocab.pieces(hypothesis.tokens),
                  "finished": hypothesis.finished}
        if hypothesis.positional_scores is not None:
            record["positional_scores"] = [_finite(x) for x in hypothesis.positional_scores]
        if hypothesis.alignment is not None:
            record["alignment"] = hypothesis.alignment
        records.append(record)
    return {"id": line_id, "source": source, "hypotheses": records}


def translate_stream(translator: Translator, lines: Iterable[str], write: Callable[[str], None],
                     buffer_size: int, progress: LineProgress | None = None,
                     output_format: str = "text", line_files: Sequence[LineFile] = (),
                     glossary: Glossary | None = None) -> list[str]:
    """Translate `lines` `buffer_size` at a time, writing one output line per input line (with
    nbest R > 1, R lines `score<TAB>text` per input: line R * i + r of the output
    is hypothesis r of input line i; `nan<TAB>`, no text, stands for no hypothesis: R of them
    for a line of no pieces, and the rest of a sentence's R when fewer exist; with alignments
    each line ends with a tab and the hypothesis's `i-j` pairs); with `output_format` "jsonl",
    one `json_record` per input line. `line_files`: target prefixes or constraints, an entry per
    input line (`Translator.translate`); `glossary`: its terms found in a line join the line's
    constraints (`vtx.inference.glossary`). Returns the best hypotheses' texts; `progress` is
    told of each batch of the search as it finishes, and finished at the end.

    Raises:
        ArgumentError: one of `line_files` has another number of lines than `lines`.
    """
    best, number = [], 1
    lines = iter(lines)
    while chunk := list(itertools.islice(lines, buffer_size)):
        extra = {f.keyword: f.chunk(number - 1, len(chunk)) for f in line_files}
        if glossary is not None:
            extra["constraints"] = translator_constraints(
                translator, glossary, chunk, extra.get("constraints"),
                range(number - 1, number - 1 + len(chunk)))
        for offset, hypotheses in enumerate(translator.translate(
                chunk, number, progress.batch if progress else None, **extra)):
            best.append(hypotheses[0].text if hypotheses else "")
            if output_format == "jsonl":
                write(json_record(translator, number - 1 + offset, chunk[offset], hypotheses))
                continue
            # With alignments, each line ends with a tab and its hypothesis's alignment.
            aligned = translator.options.alignment_layer is not None
            ending = lambda hypothesis: f"\t{hypothesis.alignment or ''}" if aligned else ""
            empty = Hypothesis("", float("nan"))
            if translator.options.nbest == 1:
                write(best[-1] + ending(hypotheses[0] if hypotheses else empty))
                continue
            missing = translator.options.nbest - len(hypotheses)
            for hypothesis in hypotheses + [empty] * missing:
                write(f"{hypothesis.score:.4f}\t{hypothesis.text}{ending(hypothesis)}")
        number += len(chunk)
        if progress:  # with the chunk's empty lines, not searched
            progress.reach(number - 1)
    for line_file in line_files:
        line_file.check_count(number - 1)
    if progress:
        progress.finish()
    return best


def translate_file(checkpoint: str | Path | Sequence[str | Path], input_path: str | Path | None,
                   output_path: str | Path | None, options: DecodeOptions,
                   buffer_size: int = 1024, force: bool = False,
                   warn: Callable[[str], None] = lambda message: None,
                   log: Callable[[str], None] = lambda message: None,
                   other_inputs: dict[str, str | Path | None] | None = None,
                   ema: bool = False, output_format: str = "text",
                   prefix_path: str | Path | None = None,
                   constraints_path: str | Path | None = None,
                   glossary_path: str | Path | None = None,
                   precision: DecodingPrecision = DecodingPrecision()) -> list[str]:
    """`vtx translate` as a library call: lines of `input_path` (None: stdin) translated into
    `output_path` (None: stdout) by the model of `checkpoint` (a file, or a save dir's newest;
    a list of them: their ensemble), written as `output_format` says (`translate_stream`);
    with `prefix_path` each line's hypotheses start with that file's line; with
    `constraints_path` every finished hypothesis holds the phrases of that file's line
    (`read_constraints`); with `glossary_path` the target terms of the glossary's source terms
    found in a line join its constraints (`vtx.inference.glossary`).

    Returns:
        The best hypothesis of every line, in input order.

    `other_inputs` (flag -> file) are files of the caller that `output_path` may not be either.
    `ema`: the checkpoint's EMA weights (`checkpoints.with_ema_weights`). `precision`: the
    dtype policy and quantization the models are built in.

    Raises:
        OutputExistsError: `output_path` exists and `force` is false (checked before any work).
        ArgumentError: standard output is closed and no `output_path` is given.
        OSError, ValueError: an unreadable input or checkpoint (named), or `output_path` is one
            of the inputs; constraints with a mode they exclude (`DecodeOptions`), or a phrase
            of no pieces.
    """
    options = dataclasses.replace(options, prefix=options.prefix or bool(prefix_path),
                                  constraints=options.constraints or bool(constraints_path)
                                  or bool(glossary_path))
    several = not isinstance(checkpoint, (str, Path))
    paths = [check_output(output_path, force, one, {
        "--input": input_path, "--prefix": prefix_path, "--constraints": constraints_path,
        "--glossary": glossary_path, **(other_inputs or {})})
        for one in (checkpoint if several else [checkpoint])]
    line_files = read_line_files(input_path, prefix_path, constraints_path)
    glossary = Glossary.read(glossary_path) if glossary_path else None
    with contextlib.ExitStack() as stack:
        source = open_source(input_path, stack)  # a closed stdin is said before the model loads
        translator = Translator(*load_models(paths, ema, precision), options, warn)
        for path in paths:
            log(f"checkpoint: {path}")
        if glossary is not None:
            glossary.check_targets(lambda text: len(translator.vocab.encode(text)),
                                   str(glossary_path))
        for line_file in line_files:  # every phrase, before the search
            if line_file.keyword == "constraints":
                for number, phrases in enumerate(line_file.entries, 1):
                    translator.encode_constraints(phrases, number, line_file.path)
        progress = LineProgress(log, "translated", lines_in_file(input_path) if input_path
                                    else None)
        with output_sink(output_path, flush_each_line=buffer_size == 1, force=force) as write:
            return translate_stream(translator, read_lines(source, input_path or STDIN),
                                    write, buffer_size, progress, output_format, line_files,
                                    glossary)


def bleu(hypotheses: list[str], reference_path: str | Path,
         references: list[str] | None = None) -> tuple[str, str]:
    """Detokenized sacreBLEU of `hypotheses` against a reference file: (score line, signature).

    Args:
        references: the file's lines when already read (`read_references`).

    Raises:
        ArgumentError: the reference has another number of lines (a ValueError naming
            `reference_path` and both counts), or both are empty.
        DataError: it is not UTF-8 (`read_references`).
    """
    import sacrebleu

    if references is None:
        references = read_references(reference_path)
    if len(references) != len(hypotheses):
        raise ArgumentError("{reference_path} {path} has {references} lines, the input "
                            "{hypotheses}", path=reference_path, references=len(references),
                            hypotheses=len(hypotheses))
    if not references:
        raise ArgumentError("{reference_path} {path} and the input are empty: no BLEU to "
                            "compute", path=reference_path)
    metric = sacrebleu.metrics.BLEU()
    score = metric.corpus_score(hypotheses, [references])
    return str(score), str(metric.get_signature())
