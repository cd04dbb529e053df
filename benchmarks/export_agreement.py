"""How closely each export of a checkpoint reproduces `vtx translate` on the same lines.

Exports the checkpoint (`vtx.export.export`) to each of --formats, translates the English side of
Multi30k test_2016 (or --input) with `vtx translate`'s Translator and with the export, and prints
per search the identical output lines and both BLEU scores (against --reference; default the
German side of test_2016), side by side:
  * ctranslate2 (`vtx.export.ct2.translate_lines`, |Y|^alpha, the only penalty it has): greedy,
    and beam --beam against vtx with the GNMT penalty (the paper's) and with |Y|^alpha;
  * transformers (MarianMTModel, `vtx.export.marian.translate_lines`): greedy, and beam --beam
    against vtx with the settings that make both searches one (`--lenpen-formula fairseq
    --stop fairseq`); and the gap between vtx's and the MarianMTModel's log-probabilities of the
    reference's tokens (teacher-forced), max and median over sentences of a sentence's largest;
  * keras-hub (`keras_hub.models.Seq2SeqLM.from_preset`, whose generate() runs vtx's search):
    greedy and the paper's beam search.

Usage: python benchmarks/export_agreement.py --checkpoint PATH [--input FILE --reference FILE]
       [--limit N] [--beam 4] [--lenpen 0.6] [--formats ctranslate2,transformers,keras-hub]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import tempfile
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import vtx  # noqa: F401,E402  (before TensorFlow: it sets TensorFlow's environment)

import numpy as np  # noqa: E402

from vtx import checkpoints  # noqa: E402
from vtx.export import export  # noqa: E402
from vtx.inference.decoding import DecodeOptions  # noqa: E402
from vtx.inference.loading import load_models, resolve_checkpoint  # noqa: E402
from vtx.inference.translator import load_translator  # noqa: E402

DATA = Path(os.environ.get("VTX_SHARED_DATA",
                           Path(__file__).resolve().parents[1].parent / "shared" / "data"))
FORMATS = ("ctranslate2", "transformers", "keras-hub")


def read_lines(path: Path | None, language: str, limit: int) -> list[str]:
    """The first `limit` lines of `path`, or of Multi30k test_2016 in `language`."""
    if path is None:
        path = DATA / "multi30k" / f"test_2016_flickr.{language}.gz"
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        return handle.read().splitlines()[:limit]


def sacrebleu_score(hypotheses: list[str], references: list[str]) -> float:
    import sacrebleu

    return sacrebleu.corpus_bleu(hypotheses, [references]).score


class Comparison:
    """vtx's outputs per search (computed once) and the printed rows of each export's."""

    def __init__(self, path: Path, lines: list[str], references: list[str]):
        self.path, self.lines, self.references = path, lines, references
        self._vtx: dict[DecodeOptions, list[str]] = {}
        # The figures, printed last as one `RESULT ` JSON line: a row per export and search,
        # and what else a comparison measured (the Transformers export's log-prob gaps).
        self.figures: dict = {"checkpoint": str(path), "lines": len(lines), "rows": []}

    def vtx_output(self, options: DecodeOptions) -> list[str]:
        if options not in self._vtx:
            translator = load_translator(self.path, options)
            self._vtx[options] = [found[0].text if found else ""
                                  for found in translator.translate(self.lines)]
        return self._vtx[options]

    def row(self, export_name: str, search: str, theirs: list[str],
            options: DecodeOptions) -> None:
        ours = self.vtx_output(options)
        same = sum(a == b for a, b in zip(ours, theirs))
        row = {"export": export_name, "search": search, "identical": same,
               "bleu_export": sacrebleu_score(theirs, self.references),
               "bleu_vtx": sacrebleu_score(ours, self.references)}
        self.figures["rows"].append(row)
        print(f"| {export_name} | {search} | {same}/{len(ours)} ({100 * same / len(ours):.1f}%) "
              f"| {row['bleu_export']:.2f} | {row['bleu_vtx']:.2f} |", flush=True)


def compare_ctranslate2(comparison: Comparison, directory: Path, beam: int,
                        lenpen: float) -> None:
    import ctranslate2
    import sentencepiece

    from vtx.export.ct2 import SENTENCEPIECE_FILE, translate_lines

    model = ctranslate2.Translator(str(directory), device="cpu")
    processor = sentencepiece.SentencePieceProcessor(
        model_file=str(directory / SENTENCEPIECE_FILE))
    max_positions = checkpoints.load(comparison.path).meta["model_config"]["max_positions"]

    def theirs(width: int) -> list[str]:
        return translate_lines(model, processor, comparison.lines,
                               DecodeOptions(beam=width, lenpen=lenpen, lenpen_formula="fairseq"),
                               max_positions=max_positions)

    comparison.row("ctranslate2", "greedy", theirs(1), DecodeOptions(beam=1))
    beam_output = theirs(beam)
    comparison.row("ctranslate2", f"beam {beam}, \\|Y\\|^{lenpen} vs vtx GNMT", beam_output,
                   DecodeOptions(beam=beam, lenpen=lenpen))
    comparison.row("ctranslate2", f"beam {beam}, \\|Y\\|^{lenpen} both", beam_output,
                   DecodeOptions(beam=beam, lenpen=lenpen, lenpen_formula="fairseq"))


def marian_log_prob_gaps(marian, comparison: Comparison, rows: int = 64) -> np.ndarray:
    """Per reference sentence, the largest |log P_vtx - log P_Marian| over its tokens and EOS
    (teacher-forced: vtx's by `vtx.inference.rescore.Scorer`)."""
    import torch

    from vtx.inference.rescore import Scorer

    model, vocab = load_models([comparison.path])
    positions = model[0].config.max_positions
    pairs = [(vocab.encode(source)[:positions], vocab.encode(target)[:positions - 1])
             for source, target in zip(comparison.lines, comparison.references)]
    pairs = [(source, target) for source, target in pairs if source]
    ours = Scorer(model, vocab, DecodeOptions()).score(pairs)
    gaps = []
    for start in range(0, len(pairs), rows):
        chunk = pairs[start:start + rows]
        source = np.zeros((len(chunk), max(len(s) for s, _ in chunk)), np.int64)  # [B, S]
        decoder_in = np.zeros((len(chunk), max(len(t) for _, t in chunk) + 1), np.int64)
        for row, (ids, target) in enumerate(chunk):
            source[row, :len(ids)] = ids
            decoder_in[row, :len(target) + 1] = [2] + target  # BOS, then the target: [B, T]
        with torch.no_grad():
            logits = marian(input_ids=torch.tensor(source),
                            attention_mask=torch.tensor(source != 0),
                            decoder_input_ids=torch.tensor(decoder_in)).logits  # [B, T, V]
        theirs = logits.log_softmax(-1).numpy()
        for row, (_, target) in enumerate(chunk):
            wanted = target + [3]  # EOS
            marian_scores = theirs[row, np.arange(len(wanted)), wanted]
            gaps.append(np.abs(marian_scores - ours[start + row].positional_scores).max())
    return np.array(gaps)


def compare_transformers(comparison: Comparison, directory: Path, beam: int,
                         lenpen: float) -> None:
    import transformers

    from vtx.export.marian import translate_lines

    marian = transformers.MarianMTModel.from_pretrained(str(directory), local_files_only=True)
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(directory), local_files_only=True)
    marian.eval()
    greedy = DecodeOptions(beam=1)
    comparison.row("transformers", "greedy",
                   translate_lines(marian, tokenizer, comparison.lines, greedy), greedy)
    same_search = DecodeOptions(beam=beam, lenpen=lenpen, lenpen_formula="fairseq",
                                stop="fairseq")
    comparison.row("transformers", f"beam {beam}, \\|Y\\|^{lenpen}, early stopping both",
                   translate_lines(marian, tokenizer, comparison.lines, same_search),
                   same_search)
    gaps = marian_log_prob_gaps(marian, comparison)
    comparison.figures["transformers_log_prob_gap"] = {
        "max": float(gaps.max()), "median": float(np.median(gaps)), "sentences": len(gaps)}
    print(f"transformers: reference log-probabilities, a sentence's largest gap to vtx's: "
          f"max {gaps.max():.2e}, median {np.median(gaps):.2e} over {len(gaps)} sentences",
          flush=True)


def compare_keras_hub(comparison: Comparison, directory: Path, beam: int,
                      lenpen: float) -> None:
    import keras_hub

    import vtx.hub  # noqa: F401  (registers vtx's classes with Keras)

    for search, options in (("greedy", DecodeOptions(beam=1)),
                            (f"beam {beam}, GNMT alpha {lenpen} (the paper's)",
                             DecodeOptions(beam=beam, lenpen=lenpen))):
        task = keras_hub.models.Seq2SeqLM.from_preset(str(directory), beam=options.beam,
                                                      lenpen=options.lenpen)
        theirs = [str(text) for text in task.generate(comparison.lines)]
        comparison.row("keras-hub", search, theirs, options)


COMPARE = {"ctranslate2": compare_ctranslate2, "transformers": compare_transformers,
           "keras-hub": compare_keras_hub}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--checkpoint", type=Path, required=True)
    parser.add_argument("--input", type=Path, help="default: Multi30k test_2016 English")
    parser.add_argument("--reference", type=Path, help="default: Multi30k test_2016 German")
    parser.add_argument("--limit", type=int, default=1000)
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--lenpen", type=float, default=0.6)
    parser.add_argument("--formats", default=",".join(FORMATS))
    args = parser.parse_args()
    formats = args.formats.split(",")
    unknown = sorted(set(formats) - set(FORMATS))
    if unknown:
        parser.error(f"--formats: unknown {', '.join(unknown)} (known: {', '.join(FORMATS)})")

    path = resolve_checkpoint(args.checkpoint)
    lines = read_lines(args.input, "en", args.limit)
    references = read_lines(args.reference, "de", args.limit)
    if len(lines) != len(references):
        parser.error(f"--input has {len(lines)} lines, --reference {len(references)}")
    comparison = Comparison(path, lines, references)
    print(f"{path}: {len(lines)} lines")
    print("| export | search | identical lines | BLEU, export | BLEU, vtx |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name in formats:
            directory = export(path, Path(tmp) / name, name)
            COMPARE[name](comparison, directory, args.beam, args.lenpen)
    print("RESULT " + json.dumps(comparison.figures), flush=True)


if __name__ == "__main__":
    main()
