"""Translation speed of vtx's beam search: sentences/s and target tokens/s (issue 5, "Measure").

A `base`-size Transformer (paper Table 3) with random weights, float32, beam 4, alpha 0.6, each
sentence's output limited to |Y| <= source length + 50 (the paper's limit), over the English side of
Multi30k test_2016. Two ways to feed the search:
  * batched: sentences sorted by length, batches bounded by --max-tokens padded source tokens,
    source lengths padded up to a multiple of 8 so that a few shapes are traced and reused;
  * one sentence at a time, in input order.

Until the vocabularies of `vtx preprocess` exist, source words are mapped to ids by a hash of the
whitespace-split word into a 37000-token vocabulary (ids 4..36999; PAD/UNK/BOS/EOS keep 0..3), and
EOS is appended. Random weights give random, mostly maximal output lengths, so compare target
tokens/s rather than sentences/s.

With --ctranslate2, the same weights are exported by `vtx.export.ct2.save_model` (float32) and
CTranslate2 translates the same batches (one `translate_batch` per batch, beam 4, its |Y|^alpha
length penalty, `max_decoding_length` = the batch's largest a * |X| + b) and the same sentences
one at a time; the ratio vtx / CTranslate2 of target words/s is printed (issue 5's target: >= 0.5x
CTranslate2 float32). The fairseq comparison is not written (fairseq does not install here).

Usage: python benchmarks/translate_speed.py [--limit N] [--single-limit N] [--jit-compile]
       [--ctranslate2] [--threads N]
"""

from __future__ import annotations

import argparse
import gzip
import os
import tempfile
import time
import zlib
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402

from vtx.config import BASE, EOS_ID, PAD_ID  # noqa: E402
from vtx.inference.model_search import make_search_fn  # noqa: E402
from vtx.models import transformer  # noqa: E402

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
FIRST_WORD_ID = 4  # after PAD, UNK, BOS, EOS


def hashed_ids(line: str, vocab_size: int) -> list[int]:
    """Whitespace words -> stable hash ids in [4, vocab_size), then EOS (a stand-in vocabulary)."""
    return [FIRST_WORD_ID + zlib.crc32(word.encode()) % (vocab_size - FIRST_WORD_ID)
            for word in line.split()] + [EOS_ID]


def length_sorted_batches(lengths: list[int], max_tokens: int, multiple: int = 8):
    """Indices grouped into batches of similar length with B * padded S <= max_tokens."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    batches, current = [], []
    for index in order:
        padded = -(-lengths[index] // multiple) * multiple
        if current and (len(current) + 1) * padded > max_tokens:
            batches.append(current)
            current = []
        current.append(index)
    return batches + ([current] if current else [])


def pad(sources: list[list[int]], multiple: int = 8) -> np.ndarray:
    """[B, S] int32, S the longest length rounded up to `multiple`, PAD_ID after each source."""
    length = -(-max(map(len, sources)) // multiple) * multiple
    return np.array([s + [PAD_ID] * (length - len(s)) for s in sources], np.int32)


def run(search, sources: list[list[int]], batches: list[list[int]]) -> dict:
    """Translate every batch, timed, after one untimed warm-up call per padded shape (the trace)."""
    padded_batches = [pad([sources[i] for i in batch]) for batch in batches]
    shapes = {source.shape: source for source in padded_batches}
    start = time.perf_counter()
    for source in shapes.values():
        search(source).lengths.numpy()
    warmup = time.perf_counter() - start
    start, words = time.perf_counter(), 0
    for source in padded_batches:
        words += int(search(source).lengths.numpy()[:, 0].sum())  # 1-best words, EOS not counted
    seconds = time.perf_counter() - start
    return {"sentences": len(sources), "words": words, "seconds": seconds,
            "shapes": len(shapes), "warmup_seconds": warmup}


def ctranslate2_search(model, directory: Path, threads: int):
    """A `search(source [B, S]) -> words per sentence` over a CTranslate2 export of `model`."""
    import ctranslate2

    from vtx.export.ct2 import save_model

    pieces = ["<pad>", "<unk>", "<s>", "</s>"] + [f"w{i}" for i in range(4, model.config.vocab_size)]
    save_model(model, pieces, directory)
    translator = ctranslate2.Translator(str(directory), device="cpu", compute_type="float32",
                                        inter_threads=1, intra_threads=threads)

    def search(source: np.ndarray, beam: int) -> list[int]:
        tokens = [[pieces[i] for i in row if i != PAD_ID] for row in source.tolist()]
        limit = max(len(t) for t in tokens) + 50  # a = 1, b = 50
        results = translator.translate_batch(tokens, beam_size=beam, length_penalty=0.6,
                                             max_decoding_length=limit,
                                             max_batch_size=len(tokens))
        return [len(r.hypotheses[0]) for r in results]

    return search


def run_ctranslate2(search, beam: int, sources: list[list[int]], batches: list[list[int]]) -> dict:
    """`run` for CTranslate2: same batches, one warm-up call first."""
    padded_batches = [pad([sources[i] for i in batch]) for batch in batches]
    start = time.perf_counter()
    search(padded_batches[0], beam)
    warmup = time.perf_counter() - start
    start, words = time.perf_counter(), 0
    for source in padded_batches:
        words += sum(search(source, beam))
    seconds = time.perf_counter() - start
    return {"sentences": len(sources), "words": words, "seconds": seconds, "shapes": 1,
            "warmup_seconds": warmup}


def report(name: str, result: dict) -> None:
    print(f"{name}: {result['sentences']} sentences, {result['words']} target words in "
          f"{result['seconds']:.1f} s: {result['sentences'] / result['seconds']:.2f} sentences/s, "
          f"{result['words'] / result['seconds']:.1f} target words/s (warm-up: {result['shapes']} "
          f"shapes traced and run once in {result['warmup_seconds']:.1f} s)", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--limit", type=int, default=1000, help="sentences translated batched (0: skip)")
    parser.add_argument("--single-limit", type=int, default=1000,
                        help="sentences translated one at a time (0: skip)")
    parser.add_argument("--max-tokens", type=int, default=1024)
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--jit-compile", action="store_true", help="XLA-compile the search")
    parser.add_argument("--ctranslate2", action="store_true",
                        help="also time CTranslate2 float32 on the same weights")
    parser.add_argument("--threads", type=int, default=os.cpu_count(),
                        help="CTranslate2 intra-op threads (TensorFlow uses every core)")
    args = parser.parse_args()

    with gzip.open(args.data / "multi30k" / "test_2016_flickr.en.gz", "rt", encoding="utf-8") as f:
        lines = f.read().splitlines()
    keras.utils.set_random_seed(0)
    model = transformer.build(BASE)
    search = make_search_fn(model, beam_size=args.beam, alpha=0.6, max_len_a=1.0, max_len_b=50,
                            jit_compile=args.jit_compile)
    sources = [hashed_ids(line, BASE.vocab_size) for line in lines]
    print(f"base model {model.count_params():,} parameters, beam {args.beam}, "
          f"jit_compile={args.jit_compile}, {len(sources)} lines available", flush=True)
    ct2 = None
    if args.ctranslate2:
        tmp = tempfile.TemporaryDirectory()
        ct2 = ctranslate2_search(model, Path(tmp.name) / "ct2", args.threads)
    batched, single = sources[:args.limit], sources[:args.single_limit]
    runs = []
    if batched:
        batches = length_sorted_batches(list(map(len, batched)), args.max_tokens)
        runs.append((f"batched (max {args.max_tokens} tokens)", batched, batches))
    if single:
        runs.append(("one at a time", single, [[i] for i in range(len(single))]))
    for name, chosen, batches in runs:
        vtx_result = run(search, chosen, batches)
        report(f"vtx {name}", vtx_result)
        if ct2 is not None:
            ct2_result = run_ctranslate2(ct2, args.beam, chosen, batches)
            report(f"CTranslate2 float32 {name} ({args.threads} threads)", ct2_result)
            ratio = (vtx_result["words"] / vtx_result["seconds"]) / (
                ct2_result["words"] / ct2_result["seconds"])
            print(f"  vtx / CTranslate2 target words/s: {ratio:.3f}", flush=True)


if __name__ == "__main__":
    main()
