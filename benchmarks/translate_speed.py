"""Decoding speed of exactly what `vtx translate` runs, against CTranslate2 at its fastest
setting on the same weights.

A trained checkpoint (default: the tests' tiny Multi30k model, `tests/fixtures/multi30k_tiny.npz`;
pass the quick start's `runs/quickstart/average.npz` for a real-size one) translates the lines of
`--input` (default: Multi30k test_2016, English, 1000 lines) with `vtx.inference.translator`'s
Translator, the object `vtx translate` uses: its length-sorted padded batches of `--max-tokens`,
its compiled search, decoding to text. vtx runs at each setting of its own sweep, as
CTranslate2 does: every precision of `--precisions` (`vtx translate --precision`: auto, the
default, chosen here as `vtx translate` chooses, float32, bfloat16) with every quantization of `--quantize` (none, int8) and every `--max-tokens`. A
markdown table gives each setting's steady call, its lines identical to vtx's float32 output,
its BLEU against that output and against `--reference` (default: the input's German side);
then the fastest setting. vtx searches `--search-threads` batches at once (`vtx translate
--search-threads`), each on `--threads` / N cores; TensorFlow fixes its thread pools when it
starts, so a sweep over them is a run per value, each row of the CSV keeping its own. Each system makes `--repeat`
calls on the same lines: the first warms it up (vtx's traces the search); the steady call is
the fastest of the others (the first when it is the only one).

With --ctranslate2 the checkpoint is exported once (`vtx.export.ct2.write_ctranslate2`) and
CTranslate2 translates the same lines through `vtx.export.ct2.translate_lines` (the same length
limits), on the GPU when CTranslate2 sees one (`--ct2-device`), as vtx's TensorFlow does. Both
then use the |Y|^alpha length penalty (`fairseq`, CTranslate2's only one) and stop a sentence's
search once `--beam` hypotheses have finished (`--stop fairseq`, what CTranslate2 does when
alpha > 0), so they solve the same search problem. CTranslate2 runs at each setting of a sweep:
every compute type of `--ct2-compute-types` (those the device lacks are skipped, and named) with
every inter_threads of `--ct2-inter-threads` (batches translated at once, each on `--threads` /
N cores, as vtx's search threads), every batch type of `--ct2-batch-types` and max batch size of
`--ct2-max-batch-sizes`. A markdown
table gives each setting's steady call, its lines identical to vtx's and its BLEU against vtx's
float32 output; then come the fastest setting of each side and vtx's speed against it. `--csv PATH` appends a
row per setting as it is measured, in the columns of `benchmarks/results/decoding_vs_ct2.csv`
(`CSV_COLUMNS`), which `benchmarks/plot.py` draws.

With --profile DIR one more call of vtx's fastest setting runs under TensorFlow's profiler, its
trace written into DIR and summarized by `benchmarks/xplane_summary.py` (operations by type,
busy and idle core time).

With --modes each decoding mode (sampling, a prefix, an ensemble of two copies of the model,
positional scores, alignments, lexical constraints) translates the same lines after the plain
search, and its steady call is printed with its cost against the plain one. A line's prefix is
the first word of its plain translation, its constraints the two longest words of it.

Figures: sentences/s and target tokens/s (SentencePiece pieces of the outputs, EOS not counted)
and the wall time of each call. Run it alone on the machine (other work distorts the timings)
and quote the machine printed on the first line.

With --marian DIR a Transformers MarianMT folder (an OPUS-MT model) is read as `vtx import` reads
it, and CTranslate2 converts the same folder with its own converter. `--fixed-length N` gives
every line the length limit N on both sides: with `benchmarks/opus_mt_folder.py`'s folder
(opus-mt-en-de's size and configuration, random weights, a model that never ends a line) each
output is then N pieces, so both sides run the same number of steps.

Usage: python benchmarks/translate_speed.py [--checkpoint PATH | --marian DIR] [--fixed-length N]
       [--input FILE] [--limit N]
       [--reference FILE] [--beam 4] [--lenpen 0.6] [--stop RULE] [--max-tokens 16384,...]
       [--repeat 2] [--threads N] [--search-threads 2] [--jit | --no-jit] [--precisions float32,bfloat16]
       [--quantize none,int8] [--modes] [--profile DIR] [--ctranslate2]
       [--ct2-device auto|cpu|cuda] [--ct2-compute-types LIST] [--ct2-inter-threads 1,2]
       [--ct2-batch-types LIST]
       [--ct2-max-batch-sizes LIST] [--csv PATH]
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import gzip
import itertools
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import vtx  # noqa: F401  (before TensorFlow: it sets TensorFlow's environment, vtx/__init__.py)

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("VTX_SHARED_DATA", ROOT.parent / "shared" / "data"))
# vtx's settings: `vtx translate --precision` and `--quantize` (`vtx.precision`).
from vtx.precision import (AUTO, DECODING_POLICIES, DECODING_PRECISIONS,  # noqa: E402
                           QUANTIZATIONS)  # (no TensorFlow)
# CTranslate2's compute types tried by default on each device; those it lacks are skipped.
CT2_COMPUTE_TYPES = {"cuda": ("float32", "float16", "bfloat16", "int8_float16"),
                     "cpu": ("float32", "int8", "int8_float32", "bfloat16")}
# CTranslate2's max_batch_size tried by default for each batch_type: sentences, source tokens.
CT2_MAX_BATCH_SIZES = {"examples": (32, 64, 128, 256, 1024),
                       "tokens": (2048, 4096, 8192, 16384)}
# --csv's columns, those of benchmarks/results/decoding_vs_ct2.csv: one row per CTranslate2
# setting, vtx's figures those of its fastest setting (precision, vtx_quantize, vtx_max_tokens).
# identical_lines: CTranslate2's lines identical to vtx's; vtx_bleu (empty in float32 without
# int8) and ct2_bleu: BLEU against vtx's float32 output.
CSV_COLUMNS = ("machine", "input", "threads", "stop", "vtx_s", "vtx_tok_s", "ct2_s", "ct2_tok_s",
               "identical_lines", "device", "lines", "precision", "vtx_bleu", "compute_type",
               "batch_type", "max_batch_size", "ct2_bleu", "commit", "date", "command",
               "vtx_quantize", "vtx_max_tokens", "vtx_search_threads", "ct2_inter_threads")
VTX_TABLE_HEADER = ("| precision | quantize | max_tokens | steady call | target tok/s | "
                    "identical lines | BLEU vs vtx float32 | BLEU vs reference |\n"
                    "|---|---|---|---|---|---|---|---|")
TABLE_HEADER = ("| compute_type | inter_threads | batch_type | max_batch_size | steady call | "
                "target tok/s | identical lines | BLEU vs vtx float32 |\n"
                "|---|---|---|---|---|---|---|---|")


def cpu_name() -> str:
    """The CPU's model name, its family and model (a VM's name may be generic: "AMD EPYC") and
    its bfloat16 units, e.g. "AMD EPYC (family 25 model 17, avx512_bf16)"."""
    try:
        output = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        name = next(line.split(":", 1)[1].strip() for line in output.splitlines()
                    if line.startswith("Model name"))
    except (OSError, StopIteration):
        name = platform.processor() or "unknown CPU"
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    fields = dict(line.split(":", 1) for line in info.split("\n\n")[0].splitlines()
                  if ":" in line)
    fields = {key.strip(): value.strip() for key, value in fields.items()}
    flags = fields.get("flags", "").split()
    units = [flag for flag in ("amx_bf16", "avx512_bf16") if flag in flags] or ["no bf16"]
    family = (f"family {fields['cpu family']} model {fields.get('model', '?')}, "
              if "cpu family" in fields else "")
    return f"{name} ({family}{', '.join(units)})"


def cpu_model() -> str:
    return f"{cpu_name()}, {os.cpu_count()} cores; load average {os.getloadavg()[0]:.2f}"


def gpu_name() -> str:
    """The first GPU TensorFlow sees, by name ("a CUDA GPU" when it sees none)."""
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    details = tf.config.experimental.get_device_details(gpus[0]) if gpus else {}
    return details.get("device_name", "a CUDA GPU")


def commit() -> str:
    try:
        done = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True)
    except OSError:
        return "unknown"
    return done.stdout.strip() or "unknown"


def read_lines(path: Path, limit: int) -> list[str]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        return [line.rstrip("\n") for _, line in zip(range(limit), handle)]


def timed_calls(translate, lines: list[str], repeat: int) -> list[tuple[float, list[str]]]:
    calls = []
    for _ in range(repeat):
        started = time.perf_counter()
        outputs = translate(lines)
        calls.append((time.perf_counter() - started, outputs))
    return calls


def steady(calls: list[tuple[float, list[str]]]) -> tuple[float, list[str]]:
    """The steady call of `calls` (seconds, outputs): the fastest after the first, which warms
    up; the first when it is the only one."""
    return min(calls[1:] or calls, key=lambda call: call[0])


def report(name: str, calls, lines: list[str], count_tokens) -> None:
    for number, (seconds, outputs) in enumerate(calls, start=1):
        kind = "first call" if number == 1 else "steady state"
        tokens = sum(map(count_tokens, outputs))
        print(f"{name:<12} call {number} ({kind}): {seconds:7.2f} s, "
              f"{len(lines) / seconds:8.1f} sentences/s, {tokens / seconds:9.0f} target tok/s")


@dataclasses.dataclass(frozen=True)
class Steady:
    """A system's steady call on the lines, its outputs judged against vtx's."""

    seconds: float
    tok_s: float  # target tokens (SentencePiece pieces, EOS not counted) a second
    identical: int  # output lines identical to vtx's
    bleu: float  # sacreBLEU against vtx's float32 output


def judge(calls, count_tokens, ours: list[str], reference: list[str]) -> Steady:
    """The steady call of `calls`: its seconds and target tok/s, its lines identical to `ours`,
    its BLEU against `reference`."""
    import sacrebleu

    seconds, outputs = steady(calls)
    return Steady(seconds, sum(map(count_tokens, outputs)) / seconds,
                  sum(mine == other for mine, other in zip(outputs, ours)),
                  sacrebleu.corpus_bleu(outputs, [reference]).score)


def longest_words(text: str, count: int) -> list[str]:
    """The `count` longest words of `text` (punctuation stripped; ties: the first), in order."""
    words = [word.strip(".,;:!?\"'()") for word in text.split()]
    longest = sorted(range(len(words)), key=lambda i: -len(words[i]))[:count]
    return [words[i] for i in sorted(longest) if words[i]]


def time_modes(translator, options, lines: list[str], repeat: int, plain: float) -> None:
    """Each decoding mode's steady call on `lines`, and its cost against the plain search's
    `plain` seconds. The prefix of a line is the first word of its plain translation, its
    constraints the two longest words of it."""
    import dataclasses

    from vtx.inference.decoding import SamplingOptions
    from vtx.inference.translator import Translator

    best = [h[0].text if h else "" for h in translator.translate(lines)]
    sample = lambda **kwargs: dataclasses.replace(options, sampling=SamplingOptions(**kwargs),
                                                  beam=1, nbest=1)
    modes = {
        "sampling": (sample(), {}, 1),
        "sampling, top-p 0.9": (sample(topp=0.9), {}, 1),
        "sampling, top-k 10": (sample(topk=10), {}, 1),
        "prefix (1 word)": (dataclasses.replace(options, prefix=True),
                            {"prefixes": [text.split(" ")[0] for text in best]}, 1),
        "ensemble of 2": (options, {}, 2),
        "positional scores": (dataclasses.replace(options, positional_scores=True), {}, 1),
        "alignments": (dataclasses.replace(options, alignment_layer=-1), {}, 1),
        "constraints (2 words)": (dataclasses.replace(options, constraints=True),
                                  {"constraints": [longest_words(text, 2) for text in best]}, 1),
    }
    for name, (mode_options, inputs, copies) in modes.items():
        mode = Translator([translator.model] * copies, translator.vocab, mode_options)
        calls = timed_calls(lambda batch: mode.translate(batch, **inputs), lines, repeat)
        seconds = steady(calls)[0]
        print(f"mode {name:<22} steady call {seconds:7.2f} s, {seconds / plain:5.2f}x the plain "
              f"search")


@dataclasses.dataclass(frozen=True)
class VtxSetting:
    """One vtx setting of the sweep."""

    precision: str  # `vtx translate --precision`: float32 or bfloat16
    quantize: str  # `vtx translate --quantize`: none or int8
    max_tokens: int  # `vtx translate --max-tokens`

    @property
    def is_float32(self) -> bool:
        """The setting computes as `vtx translate --precision float32` does."""
        return (self.precision, self.quantize) == ("float32", "none")


def vtx_settings(precisions: list[str], quantizations: list[str],
                 max_tokens: list[int]) -> list[VtxSetting]:
    """Every vtx setting of the sweep, those of one model (precision and quantization)
    together."""
    return [VtxSetting(precision, quantize, tokens) for precision in precisions
            for quantize in quantizations for tokens in max_tokens]


def resolved_precisions(precisions: list[str], jit_compile: bool) -> list[str]:
    """`precisions` with `auto` replaced by what `vtx translate --precision auto` chooses here
    (printed with why), each once."""
    from vtx.precision import resolve_decoding_precision

    if AUTO in precisions:
        chosen = resolve_decoding_precision(AUTO, jit_compile=jit_compile)
        print(f"--precisions auto: {chosen.name} ({chosen.reason})")
        precisions = [chosen.name if name == AUTO else name for name in precisions]
    return list(dict.fromkeys(precisions))


def sweep_vtx(checkpoint, vocab, options, settings: list[VtxSetting], lines: list[str],
              repeat: int, references: list[str] | None,
              ) -> tuple[list[tuple[VtxSetting, Steady, list[str]]], list[str]]:
    """Each vtx setting's calls on `lines` (one model per precision and quantization, as
    `vtx translate --precision --quantize` loads it), and a row of a markdown table each, its
    BLEU against vtx's float32 output and against `references`. The float32 output is that of
    the sweep's first float32 setting, or of a float32 model translating once when it has none.

    Returns:
        (setting, its steady call judged against the float32 output, its steady outputs) of
        each setting, and the float32 output.
    """
    import sacrebleu

    from vtx.inference.loading import load_model
    from vtx.inference.translator import Translator

    count = lambda text: len(vocab.encode(text))
    decode = lambda model: lambda batch: [h[0].text if h else "" for h in model.translate(batch)]
    built = lambda setting: load_model(checkpoint, DECODING_POLICIES[setting.precision],
                                       quantize=setting.quantize)
    measured, models = [], {}
    for setting in settings:
        key = (setting.precision, setting.quantize)
        models = models if key in models else {key: built(setting)}  # one model held at a time
        translator = Translator([models[key]], vocab,
                                dataclasses.replace(options, max_tokens=setting.max_tokens))
        calls = timed_calls(decode(translator), lines, repeat)
        report(f"vtx {setting.precision} {setting.quantize} {setting.max_tokens}", calls, lines,
               count)
        measured.append((setting, calls))
    float32 = next((steady(calls)[1] for setting, calls in measured if setting.is_float32),
                   None) or decode(Translator([load_model(checkpoint)], vocab, options))(lines)
    print(VTX_TABLE_HEADER)
    judged = []
    for setting, calls in measured:
        result, outputs = judge(calls, count, float32, float32), steady(calls)[1]
        against = (f"{sacrebleu.corpus_bleu(outputs, [references]).score:.2f}"
                   if references else "-")
        print(f"| {setting.precision} | {setting.quantize} | {setting.max_tokens} | "
              f"{result.seconds:.2f} s | {result.tok_s:,.0f} | {result.identical}/{len(lines)} | "
              f"{result.bleu:.2f} | {against} |", flush=True)
        judged.append((setting, result, outputs))
    return judged, float32


@dataclasses.dataclass(frozen=True)
class Setting:
    """One CTranslate2 setting of the sweep."""

    compute_type: str  # the Translator's: the type of its weights and of its computations
    inter_threads: int  # the Translator's: batches translated at once, each on --threads /
    # inter_threads cores (intra_threads)
    batch_type: str  # "examples" or "tokens": what max_batch_size counts
    max_batch_size: int


def ct2_settings(compute_types: list[str], inter_threads: list[int], batch_types: list[str],
                 max_batch_sizes: list[int] | None) -> list[Setting]:
    """Every setting of the sweep, those of one compute type and inter_threads together (one
    Translator each); `max_batch_sizes` None: each batch type's CT2_MAX_BATCH_SIZES."""
    return [Setting(compute_type, inter, batch_type, size) for compute_type in compute_types
            for inter in inter_threads for batch_type in batch_types
            for size in max_batch_sizes or CT2_MAX_BATCH_SIZES[batch_type]]


def supported_compute_types(device: str, wanted: list[str]) -> list[str]:
    """The compute types of `wanted` that CTranslate2 runs on `device`; the others are printed
    as skipped."""
    import ctranslate2

    have = ctranslate2.get_supported_compute_types(device)
    skipped = [name for name in wanted if name not in have]
    if skipped:
        print(f"compute types skipped, {device} lacks them: {', '.join(skipped)} "
              f"(it has {', '.join(sorted(have))})")
    return [name for name in wanted if name in have]


def sweep(model_dir: Path, device: str, threads: int, settings: list[Setting],
          time_setting: Callable, judge_calls: Callable[[list], Steady],
          lines: int) -> Iterator[tuple[Setting, Steady]]:
    """Each setting's steady call, printed as a row of a markdown table as it is measured (one
    Translator per compute type). A setting CTranslate2 fails at (out of memory) is printed as
    failed and not yielded.

    Args:
        time_setting: (Translator, Setting) -> the calls (`timed_calls`) at that setting.
        judge_calls: calls -> their Steady (`judge`).
        lines: how many lines each call translates.
    """
    import ctranslate2

    print(TABLE_HEADER, flush=True)
    for (compute_type, inter), group in itertools.groupby(
            settings, key=lambda s: (s.compute_type, s.inter_threads)):
        model = ctranslate2.Translator(str(model_dir), device=device, compute_type=compute_type,
                                       inter_threads=inter,
                                       intra_threads=max(1, threads // inter))
        for setting in group:
            cells = (f"| {compute_type} | {inter} | {setting.batch_type} | "
                     f"{setting.max_batch_size} |")
            try:
                result = judge_calls(time_setting(model, setting))
            except RuntimeError as error:
                print(f"{cells} failed: {' '.join(str(error).split())[:120]} | | | |",
                      flush=True)
                continue
            print(f"{cells} {result.seconds:.2f} s | {result.tok_s:,.0f} | "
                  f"{result.identical}/{lines} | {result.bleu:.2f} |", flush=True)
            yield setting, result
        del model  # its memory freed before the next compute type's Translator takes its own


def print_fastest(measured: list[tuple[Setting, Steady]], vtx: Steady, lines: int) -> None:
    """The fastest setting of `measured`, and vtx's speed against it on the same lines."""
    setting, best = min(measured, key=lambda item: item[1].seconds)
    print(f"fastest CTranslate2 setting: {setting.compute_type}, inter_threads "
          f"{setting.inter_threads}, batch_type "
          f"{setting.batch_type}, max_batch_size {setting.max_batch_size}: {best.seconds:.2f} s "
          f"({best.tok_s:,.0f} target tok/s), {best.identical}/{lines} lines identical, "
          f"BLEU {best.bleu:.2f}")
    print(f"steady call seconds: vtx {vtx.seconds:.2f}, CTranslate2 {best.seconds:.2f}")
    ratio = best.seconds / vtx.seconds  # vtx's sentences/s over CTranslate2's
    faster = f"vtx is {ratio:.2f}x" if ratio >= 1 else f"CTranslate2 is {1 / ratio:.2f}x"
    print(f"vtx / CTranslate2 at its fastest (sentences/s): {ratio:.2f}; {faster} faster")


def csv_header_error(path: Path, columns: tuple[str, ...] = CSV_COLUMNS) -> str | None:
    """Why rows cannot be appended to `path`: its folder is missing, or a header that is not
    `columns`; None when they can (or the file is new)."""
    if not path.parent.is_dir():
        return f"--csv {path}: no folder {path.parent}"
    if not path.exists() or path.stat().st_size == 0:
        return None
    with path.open(newline="", encoding="utf-8") as handle:
        header = tuple(next(csv.reader(handle), ()))
    if header == columns:
        return None
    return f"--csv {path}: its columns are {','.join(header)}, not {','.join(columns)}"


def append_csv(path: Path, rows: list[dict], columns: tuple[str, ...] = CSV_COLUMNS) -> None:
    """Append `rows` (`columns`) to `path`, with the header first when it is new or empty."""
    new = not path.exists() or path.stat().st_size == 0
    ends_a_line = new or path.read_bytes().endswith(b"\n")
    with path.open("a", newline="", encoding="utf-8") as handle:
        if not ends_a_line:
            handle.write("\n")
        writer = csv.DictWriter(handle, columns, lineterminator="\n")
        if new:
            writer.writeheader()
        writer.writerows(rows)


def run_columns(args: argparse.Namespace, device: str, fastest: "VtxSetting", vtx: Steady,
                lines: int) -> dict:
    """The --csv columns that the rows of one run share: the machine, the input, vtx's fastest
    setting and its figures, the commit, the date and the command."""
    return {"machine": gpu_name() if device == "cuda" else cpu_name(), "input": args.input.name,
            "threads": args.threads, "stop": args.stop, "vtx_s": f"{vtx.seconds:.2f}",
            "vtx_tok_s": f"{vtx.tok_s:.0f}", "device": device, "lines": lines,
            "precision": fastest.precision, "vtx_quantize": fastest.quantize,
            "vtx_max_tokens": fastest.max_tokens, "vtx_search_threads": args.search_threads,
            "vtx_bleu": "" if fastest.is_float32 else f"{vtx.bleu:.2f}",
            "commit": commit(), "date": datetime.now(timezone.utc).date().isoformat(),
            "command": f"python benchmarks/translate_speed.py {shlex.join(sys.argv[1:])}"}


def setting_columns(setting: Setting, result: Steady) -> dict:
    """The --csv columns of one CTranslate2 setting."""
    return {"ct2_s": f"{result.seconds:.2f}", "ct2_tok_s": f"{result.tok_s:.0f}",
            "identical_lines": result.identical, "compute_type": setting.compute_type,
            "batch_type": setting.batch_type, "max_batch_size": setting.max_batch_size,
            "ct2_inter_threads": setting.inter_threads,
            "ct2_bleu": f"{result.bleu:.2f}"}


def compare_with_ctranslate2(args: argparse.Namespace, checkpoint, lines: list[str], options,
                             max_positions: int, judge_calls: Callable[[list], Steady],
                             fastest: "VtxSetting", vtx: Steady) -> None:
    """CTranslate2's sweep on `lines` (`sweep`), its fastest setting against vtx's steady call,
    and --csv's rows."""
    import ctranslate2
    import sentencepiece
    import tensorflow as tf

    from vtx.export.ct2 import SENTENCEPIECE_FILE, translate_lines, write_ctranslate2

    device = args.ct2_device
    if device == "auto":
        device = "cuda" if ctranslate2.get_cuda_device_count() > 0 else "cpu"
    seen = ", ".join(logical.name for logical in tf.config.list_logical_devices())
    print(f"devices: TensorFlow (vtx) sees {seen}; CTranslate2 on {device}")
    compute_types = supported_compute_types(device, args.ct2_compute_types or
                                            list(CT2_COMPUTE_TYPES[device]))
    if not compute_types:
        raise SystemExit(f"--ct2-compute-types: none of them runs on {device}")
    settings = ct2_settings(compute_types, args.ct2_inter_threads, args.ct2_batch_types,
                            args.ct2_max_batch_sizes)
    shared = run_columns(args, device, fastest, vtx, len(lines)) if args.csv else {}
    measured = []
    with tempfile.TemporaryDirectory() as folder:
        model_dir = Path(folder) / "ct2"
        if args.marian:
            from ctranslate2.converters import TransformersConverter

            TransformersConverter(str(args.marian)).convert(str(model_dir))
            processor = MarianPieces(args.marian)
        else:
            write_ctranslate2(checkpoint, model_dir)
            processor = sentencepiece.SentencePieceProcessor(
                model_file=str(model_dir / SENTENCEPIECE_FILE))
        time_setting = lambda model, setting: timed_calls(lambda batch: translate_lines(
            model, processor, batch, options, max_positions, setting.max_batch_size,
            setting.batch_type), lines, args.repeat)
        for setting, result in sweep(model_dir, device, args.threads, settings, time_setting,
                                     judge_calls, len(lines)):
            measured.append((setting, result))
            if args.csv:  # row by row: a run stopped midway keeps what it measured
                append_csv(args.csv, [{**shared, **setting_columns(setting, result)}])
    if not measured:
        raise SystemExit("CTranslate2 failed at every setting")
    print_fastest(measured, vtx, len(lines))
    if args.csv:
        print(f"{len(measured)} rows appended to {args.csv}")


class MarianPieces:
    """A MarianMT folder's pieces as CTranslate2's Marian guide tokenizes them: a source's pieces
    of source.spm then </s>; an output's pieces joined by target.spm."""

    def __init__(self, folder: Path):
        import sentencepiece

        self.source, self.target = (sentencepiece.SentencePieceProcessor(
            model_file=str(folder / name)) for name in ("source.spm", "target.spm"))

    def encode(self, line: str, out_type=str) -> list[str]:
        return self.source.encode(line, out_type=str) + ["</s>"]

    def decode_pieces(self, pieces: list[str]) -> str:
        return self.target.decode_pieces(pieces)


def profile_call(checkpoint, vocab, options, setting: "VtxSetting", lines: list[str],
                 folder: Path) -> None:
    """One call of vtx's `setting` on `lines` (after a warm-up call) under TensorFlow's profiler,
    its trace written into `folder` and summarized (`xplane_summary.py`)."""
    import tensorflow as tf

    from vtx.inference.loading import load_model
    from vtx.inference.translator import Translator

    translator = Translator([load_model(checkpoint, DECODING_POLICIES[setting.precision],
                                        quantize=setting.quantize)], vocab,
                            dataclasses.replace(options, max_tokens=setting.max_tokens))
    translator.translate(lines)
    tf.profiler.experimental.start(str(folder))
    try:
        translator.translate(lines)
    finally:
        tf.profiler.experimental.stop()
    print(f"profile of one call of the fastest vtx setting written to {folder}:")
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "xplane_summary.py"),
                    str(folder)], check=False)


def names(text: str) -> list[str]:
    """A comma-separated list."""
    return [name.strip() for name in text.split(",") if name.strip()]


def counts(text: str) -> list[int]:
    """A comma-separated list of positive integers."""
    values = [int(value) for value in names(text)]
    if not values or min(values) < 1:
        raise ValueError(text)
    return values


def parse_args() -> argparse.Namespace:
    from vtx.inference.decoding import STOP_RULES  # no TensorFlow import

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", type=Path, default=ROOT / "tests" / "fixtures" /
                        "multi30k_tiny.npz")
    parser.add_argument("--marian", type=Path, default=None,
                        help="a Transformers MarianMT folder (OPUS-MT's) instead of "
                             "--checkpoint: vtx reads it as `vtx import` does, CTranslate2 "
                             "converts it with its own TransformersConverter")
    parser.add_argument("--fixed-length", type=int, default=None,
                        help="every line's length limit, on both sides (--max-len-a 0 "
                             "--max-len-b N); with a folder of benchmarks/opus_mt_folder.py, "
                             "whose model never ends a line, each line's output is N pieces")
    parser.add_argument("--input", type=Path, default=DATA / "multi30k" / "test_2016_flickr.en.gz")
    parser.add_argument("--limit", type=int, default=1000, help="lines of --input used")
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--lenpen", type=float, default=0.6)
    parser.add_argument("--stop", choices=STOP_RULES, default=None,
                        help="vtx's stop rule (vtx translate --stop); default: fairseq with "
                             "--ctranslate2 (CTranslate2's own rule when alpha > 0), else exact")
    parser.add_argument("--reference", type=Path, default=None,
                        help="reference translations of --input, for each setting's BLEU; "
                             "default: --input's name with .de for .en, where it exists")
    parser.add_argument("--max-tokens", type=counts, default=[16384],
                        help="vtx's batches (vtx translate --max-tokens), comma separated: each "
                             "a setting of vtx's sweep; default: vtx translate's")
    parser.add_argument("--repeat", type=int, default=2,
                        help="calls on the same lines, per system and setting: one warm-up, "
                             "the fastest of the others is the steady call")
    parser.add_argument("--threads", type=int, default=os.cpu_count(),
                        help="cores each system is given: TensorFlow's intra-op threads times "
                             "--search-threads, CTranslate2's intra_threads times inter_threads")
    parser.add_argument("--search-threads", type=int, default=2,
                        help="vtx translate --search-threads: batches searched at once, each "
                             "on --threads / N cores (default: vtx translate's)")
    parser.add_argument("--jit", action=argparse.BooleanOptionalAction, default=False,
                        help="vtx's search compiled by XLA (vtx translate --jit), once per "
                             "padded batch shape")
    parser.add_argument("--precisions", type=names, default=[AUTO],
                        help="vtx translate --precision values, comma separated: "
                             f"{', '.join(DECODING_PRECISIONS)} (auto: what vtx translate "
                             "chooses here); each a setting of vtx's sweep")
    parser.add_argument("--quantize", type=names, default=["none"],
                        help="vtx translate --quantize values, comma separated: "
                             f"{', '.join(QUANTIZATIONS)}; each a setting of vtx's sweep")
    parser.add_argument("--modes", action="store_true",
                        help="also time each decoding mode (sampling, a prefix, an ensemble of "
                             "two copies, positional scores, alignments, constraints) against "
                             "the plain search, on the same lines")
    parser.add_argument("--profile", type=Path, default=None,
                        help="after the sweep, profile one call of vtx's fastest setting into "
                             "this folder and print benchmarks/xplane_summary.py's summary")
    parser.add_argument("--ctranslate2", action="store_true")
    parser.add_argument("--ct2-device", choices=("auto", "cpu", "cuda"), default="auto",
                        help="CTranslate2's device; auto: cuda when CTranslate2 sees a GPU")
    parser.add_argument("--ct2-compute-types", type=names, default=None,
                        help="CTranslate2's compute types, comma separated; default: "
                             f"{','.join(CT2_COMPUTE_TYPES['cuda'])} on cuda, "
                             f"{','.join(CT2_COMPUTE_TYPES['cpu'])} on a CPU")
    parser.add_argument("--ct2-inter-threads", type=counts, default=[1, 2],
                        help="CTranslate2's inter_threads values, comma separated: batches "
                             "translated at once, each on --threads / N cores")
    parser.add_argument("--ct2-batch-types", type=names, default=list(CT2_MAX_BATCH_SIZES),
                        help="what CTranslate2's max_batch_size counts, comma separated: "
                             "examples (sentences), tokens (source tokens)")
    parser.add_argument("--ct2-max-batch-sizes", type=counts, default=None,
                        help="CTranslate2's max_batch_size values, comma separated, for each "
                             "batch type; default: " + "; ".join(
                                 f"{','.join(map(str, sizes))} {batch_type}"
                                 for batch_type, sizes in CT2_MAX_BATCH_SIZES.items()))
    parser.add_argument("--csv", type=Path, default=None,
                        help="append one row per CTranslate2 setting to this CSV (e.g. "
                             "benchmarks/results/decoding_vs_ct2.csv)")
    args = parser.parse_args()
    unknown = sorted(set(args.ct2_batch_types) - set(CT2_MAX_BATCH_SIZES))
    if unknown or not args.ct2_batch_types:
        parser.error(f"--ct2-batch-types: unknown {', '.join(unknown) or 'empty list'} "
                     f"(known: {', '.join(CT2_MAX_BATCH_SIZES)})")
    for flag, given, known in (("--precisions", args.precisions, DECODING_PRECISIONS),
                               ("--quantize", args.quantize, QUANTIZATIONS)):
        if unknown := sorted(set(given) - set(known)) or ([] if given else ["empty list"]):
            parser.error(f"{flag}: unknown {', '.join(unknown)} (known: {', '.join(known)})")
    if args.reference is None and args.input.name.replace(".en", ".de") != args.input.name:
        german = args.input.with_name(args.input.name.replace(".en", ".de"))
        args.reference = german if german.is_file() else None
    if args.fixed_length is not None and args.fixed_length < 1:
        parser.error(f"--fixed-length: {args.fixed_length} is not a positive number of pieces")
    if args.marian and not (args.marian / "config.json").is_file():
        parser.error(f"--marian {args.marian}: no config.json there (not a MarianMT folder)")
    if args.csv and not args.ctranslate2:
        parser.error("--csv writes CTranslate2's settings: it needs --ctranslate2")
    if args.csv and (error := csv_header_error(args.csv)):
        parser.error(error)
    return args


def main() -> None:
    args = parse_args()
    from vtx.inference.threads import share_cores

    threads_line = share_cores(args.search_threads, "vtx", cores=args.threads)
    from vtx import checkpoints
    from vtx.inference.decoding import DecodeOptions
    from vtx.inference.loading import checkpoint_vocabulary, load_model
    from vtx.inference.translator import Translator

    lines = read_lines(args.input, args.limit)
    references = read_lines(args.reference, args.limit) if args.reference else None
    penalty = "fairseq" if args.ctranslate2 else "gnmt"
    args.stop = args.stop or ("fairseq" if args.ctranslate2 else "exact")
    lengths = {} if args.fixed_length is None else dict(max_len_a=0.0,
                                                        max_len_b=args.fixed_length)
    options = DecodeOptions(beam=args.beam, lenpen=args.lenpen, lenpen_formula=penalty,
                            max_tokens=args.max_tokens[0], stop=args.stop, jit_compile=args.jit,
                            search_threads=args.search_threads, **lengths)
    if args.marian:
        from vtx.imports.marian import read_marian_folder

        checkpoint, model_name = read_marian_folder(args.marian), args.marian.name
    else:
        checkpoint, model_name = checkpoints.load(args.checkpoint), args.checkpoint.name
    vocab = checkpoint_vocabulary(checkpoint, args.marian or args.checkpoint)
    print(f"machine: {cpu_model()}")
    limit = "" if args.fixed_length is None else f", every line's length {args.fixed_length}"
    print(f"{model_name}: {len(lines)} lines of {args.input.name}; beam {args.beam}, "
          f"alpha {args.lenpen} ({penalty}), --stop {args.stop}, "
          f"{'XLA' if args.jit else 'no XLA'}{limit}; {threads_line}")
    settings = vtx_settings(resolved_precisions(args.precisions, args.jit), args.quantize,
                            args.max_tokens)
    judged, float32 = sweep_vtx(checkpoint, vocab, options, settings, lines, args.repeat,
                                references)
    fastest, vtx, ours = min(judged, key=lambda item: item[1].seconds)
    print(f"fastest vtx setting: --precision {fastest.precision} --quantize {fastest.quantize} "
          f"--max-tokens {fastest.max_tokens}: {vtx.seconds:.2f} s ({vtx.tok_s:,.0f} target "
          f"tok/s), BLEU {vtx.bleu:.2f} against vtx float32")
    if args.profile:
        profile_call(checkpoint, vocab, options, fastest, lines, args.profile)
    if args.modes:
        first, plain, _ = judged[0]
        translator = Translator([load_model(checkpoint, DECODING_POLICIES[first.precision],
                                            quantize=first.quantize)], vocab,
                                dataclasses.replace(options, max_tokens=first.max_tokens))
        time_modes(translator, translator.options, lines, args.repeat, plain.seconds)
    if args.ctranslate2:
        count = lambda text: len(vocab.encode(text))
        max_positions = checkpoint.meta["model_config"]["max_positions"]
        compare_with_ctranslate2(
            args, checkpoint, lines, options, max_positions,
            lambda calls: judge(calls, count, ours, float32), fastest, vtx)


if __name__ == "__main__":
    main()
