"""Decoding speed of exactly what `vtx translate` runs, against CTranslate2 on the same weights.

A trained checkpoint (default: the tests' tiny Multi30k model, `tests/fixtures/multi30k_tiny.npz`;
pass the quick start's `runs/quickstart/average.npz` for a real-size one) translates the lines of
`--input` (default: Multi30k test_2016, English, 1000 lines) with `vtx.inference.translate`'s
Translator, the object `vtx translate` uses: its length-sorted padded batches of `--max-tokens`,
its compiled search, decoding to text. vtx's first call includes tracing the search, the later
ones are steady state; all are printed.

With --ctranslate2 the same checkpoint is exported (`vtx.export.ct2.write_ctranslate2`, float32)
and CTranslate2 translates the same lines through `vtx.export.ct2.translate_lines` (the same
length limits), on the GPU when CTranslate2 sees one (`--ct2-device`), as vtx's TensorFlow
does. Both then use the |Y|^alpha length penalty (`fairseq`, CTranslate2's only one) and stop a
sentence's search once `--beam` hypotheses have finished (`--stop fairseq`, what CTranslate2
does when alpha > 0), so they solve the same search problem, and the number of identical output
lines is printed.

With --modes each decoding mode (sampling, a prefix, an ensemble of two copies of the model,
positional scores, alignments, lexical constraints) translates the same lines after the plain
search, and its steady call is printed with its cost against the plain one. A line's prefix is
the first word of its plain translation, its constraints the two longest words of it.

Figures: sentences/s and target tokens/s (SentencePiece pieces of the outputs, EOS not counted),
the wall time of each call, and the ratios vtx / CTranslate2 (of the steady calls' tokens/s,
and of their seconds). Run it alone on the machine (other
work distorts the timings) and quote the CPU model printed on the first line.

Usage: python benchmarks/translate_speed.py [--checkpoint PATH] [--input FILE] [--limit N]
       [--beam 4] [--lenpen 0.6] [--stop RULE] [--max-tokens 16384] [--repeat 2] [--threads N]
       [--jit | --no-jit] [--ctranslate2] [--modes]
       [--ct2-max-batch-size 64] [--ct2-device auto|cpu|cuda]
"""

from __future__ import annotations

import argparse
import gzip
import os
import platform
import subprocess
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import vtx  # noqa: F401  (before TensorFlow: it sets TensorFlow's environment, vtx/__init__.py)

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("VTX_SHARED_DATA", ROOT.parent / "shared" / "data"))


def cpu_model() -> str:
    try:
        output = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        name = next(line.split(":", 1)[1].strip() for line in output.splitlines()
                    if line.startswith("Model name"))
    except (OSError, StopIteration):
        name = platform.processor() or "unknown CPU"
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    return f"{name}, {os.cpu_count()} cores, {'with' if 'avx512_bf16' in flags else 'without'} " \
           f"avx512_bf16; load average {os.getloadavg()[0]:.2f}"


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


def report(name: str, calls, lines: list[str], count_tokens) -> float:
    tokens = sum(count_tokens(output) for output in calls[-1][1])
    for number, (seconds, _) in enumerate(calls, start=1):
        kind = "first call" if number == 1 else "steady state"
        print(f"{name:<12} call {number} ({kind}): {seconds:7.2f} s, "
              f"{len(lines) / seconds:8.1f} sentences/s, {tokens / seconds:9.0f} target tok/s")
    return tokens / calls[-1][0]


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
    from vtx.inference.translate import Translator

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
        mode = Translator([translator.model] * copies if copies > 1 else translator.model,
                          translator.vocab, mode_options)
        calls = timed_calls(lambda batch: mode.translate(batch, **inputs), lines, repeat)
        print(f"mode {name:<22} steady call {calls[-1][0]:7.2f} s, "
              f"{calls[-1][0] / plain:5.2f}x the plain search")


def main() -> None:
    from vtx.inference.decoding import STOP_RULES  # no TensorFlow import

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", type=Path, default=ROOT / "tests" / "fixtures" /
                        "multi30k_tiny.npz")
    parser.add_argument("--input", type=Path, default=DATA / "multi30k" / "test_2016_flickr.en.gz")
    parser.add_argument("--limit", type=int, default=1000, help="lines of --input used")
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--lenpen", type=float, default=0.6)
    parser.add_argument("--stop", choices=STOP_RULES, default=None,
                        help="vtx's stop rule (vtx translate --stop); default: fairseq with "
                             "--ctranslate2 (CTranslate2's own rule when alpha > 0), else exact")
    parser.add_argument("--max-tokens", type=int, default=16384,
                        help="vtx's batches (vtx translate's default)")
    parser.add_argument("--repeat", type=int, default=2, help="calls on the same lines")
    parser.add_argument("--threads", type=int, default=os.cpu_count(),
                        help="threads of TensorFlow (intra-op) and CTranslate2 (intra_threads)")
    parser.add_argument("--jit", action=argparse.BooleanOptionalAction, default=False,
                        help="vtx's search compiled by XLA (vtx translate --jit), once per "
                             "padded batch shape")
    parser.add_argument("--ctranslate2", action="store_true")
    parser.add_argument("--modes", action="store_true",
                        help="also time each decoding mode (sampling, a prefix, an ensemble of "
                             "two copies, positional scores, alignments, constraints) against "
                             "the plain search, on the same lines")
    parser.add_argument("--ct2-max-batch-size", type=int, default=64,
                        help="CTranslate2's batches, in sentences (translate_lines' default)")
    parser.add_argument("--ct2-device", choices=("auto", "cpu", "cuda"), default="auto",
                        help="CTranslate2's device; auto: cuda when CTranslate2 sees a GPU")
    args = parser.parse_args()

    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    from vtx.inference.decoding import DecodeOptions
    from vtx.inference.translate import load_translator

    lines = read_lines(args.input, args.limit)
    penalty = "fairseq" if args.ctranslate2 else "gnmt"
    args.stop = args.stop or ("fairseq" if args.ctranslate2 else "exact")
    options = DecodeOptions(beam=args.beam, lenpen=args.lenpen, lenpen_formula=penalty,
                            max_tokens=args.max_tokens, stop=args.stop, jit_compile=args.jit)
    translator = load_translator(args.checkpoint, options)
    print(f"machine: {cpu_model()}")
    print(f"{args.checkpoint.name}: {translator.model.count_params()} parameters; "
          f"{len(lines)} lines of {args.input.name}; beam {args.beam}, alpha {args.lenpen} "
          f"({penalty}), --stop {args.stop}, --max-tokens {args.max_tokens}, "
          f"{'XLA' if args.jit else 'no XLA'}, {args.threads} threads; CTranslate2 "
          f"max_batch_size {args.ct2_max_batch_size}")
    count = lambda text: len(translator.vocab.encode(text))
    ours = timed_calls(lambda batch: [h[0].text if h else "" for h in
                                      translator.translate(batch)], lines, args.repeat)
    vtx_rate = report("vtx", ours, lines, count)
    if args.modes:
        time_modes(translator, options, lines, args.repeat, ours[-1][0])
    if not args.ctranslate2:
        return

    import ctranslate2
    import sentencepiece

    from vtx import checkpoints
    from vtx.export.ct2 import SENTENCEPIECE_FILE, translate_lines, write_ctranslate2

    device = args.ct2_device
    if device == "auto":
        device = "cuda" if ctranslate2.get_cuda_device_count() > 0 else "cpu"
    seen = ", ".join(logical.name for logical in tf.config.list_logical_devices())
    print(f"devices: TensorFlow (vtx) sees {seen}; CTranslate2 on {device}")
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder) / "ct2"
        write_ctranslate2(checkpoints.load(args.checkpoint), tmp)
        ct2 = ctranslate2.Translator(str(tmp), device=device, compute_type="float32",
                                     inter_threads=1, intra_threads=args.threads)
        processor = sentencepiece.SentencePieceProcessor(
            model_file=str(tmp / SENTENCEPIECE_FILE))
        theirs = timed_calls(lambda batch: translate_lines(
            ct2, processor, batch, options, max_positions=translator.model.config.max_positions,
            max_batch_size=args.ct2_max_batch_size),
            lines, args.repeat)
    ct2_rate = report("CTranslate2", theirs, lines, count)
    same = sum(a == b for a, b in zip(ours[-1][1], theirs[-1][1]))
    print(f"identical output lines: {same}/{len(lines)}")
    print(f"ratio vtx / CTranslate2 (steady-state target tok/s): {vtx_rate / ct2_rate:.2f}")
    print(f"steady call seconds: vtx {ours[-1][0]:.2f}, CTranslate2 {theirs[-1][0]:.2f}, "
          f"vtx / CTranslate2 {ours[-1][0] / theirs[-1][0]:.2f}")


if __name__ == "__main__":
    main()
