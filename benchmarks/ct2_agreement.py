"""How often CTranslate2 returns exactly vtx's translation for the same checkpoint.

Exports the checkpoint with `vtx.export.ct2`, translates the English side of Multi30k test_2016
(or --input) with `vtx translate`'s Translator and with CTranslate2 (`vtx.export.ct2.translate_lines`,
same per-sentence limit a * |X| + b), and prints the share of identical output lines for:
  * greedy (beam 1): vtx and CTranslate2 should agree on every line;
  * beam --beam with vtx's GNMT penalty ((5 + |Y|) / 6)^alpha, the paper's, vs CTranslate2's |Y|^alpha;
  * beam --beam with vtx's fairseq penalty |Y|^alpha, the same formula as CTranslate2's.

Usage: python benchmarks/ct2_agreement.py --checkpoint PATH [--input FILE] [--limit N]
       [--beam 4] [--lenpen 0.6]
"""

from __future__ import annotations

import argparse
import gzip
import os
import tempfile
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from vtx.export import export  # noqa: E402
from vtx.export.ct2 import SENTENCEPIECE_FILE, translate_lines  # noqa: E402
from vtx.inference.decoding import DecodeOptions  # noqa: E402
from vtx.inference import translate  # noqa: E402
from vtx import checkpoints  # noqa: E402

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def read_input(path: Path | None, limit: int) -> list[str]:
    if path is None:
        with gzip.open(DATA / "multi30k" / "test_2016_flickr.en.gz", "rt", encoding="utf-8") as f:
            return f.read().splitlines()[:limit]
    return path.read_text(encoding="utf-8").splitlines()[:limit]


def main() -> None:
    import ctranslate2
    import sentencepiece

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--checkpoint", type=Path, required=True)
    parser.add_argument("--input", type=Path, help="default: Multi30k test_2016 English")
    parser.add_argument("--limit", type=int, default=1000)
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--lenpen", type=float, default=0.6)
    args = parser.parse_args()

    lines = read_input(args.input, args.limit)
    path = translate.resolve_checkpoint(args.checkpoint)
    max_positions = checkpoints.load(path).meta["model_config"]["max_positions"]
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = export(path, Path(tmp) / "ct2", "ctranslate2")
        ct2 = ctranslate2.Translator(str(model_dir), device="cpu")
        processor = sentencepiece.SentencePieceProcessor(
            model_file=str(model_dir / SENTENCEPIECE_FILE))
        settings = [("greedy", 1, "gnmt"), (f"beam {args.beam}, vtx GNMT penalty", args.beam,
                                            "gnmt"),
                    (f"beam {args.beam}, vtx fairseq penalty", args.beam, "fairseq")]
        ct2_outputs = {}
        for name, beam, penalty in settings:
            options = DecodeOptions(beam=beam, lenpen=args.lenpen, lenpen_formula=penalty)
            ours = [h[0].text if h else "" for h in
                    translate.load_translator(path, options).translate(lines)]
            if beam not in ct2_outputs:
                ct2_outputs[beam] = translate_lines(
                    ct2, processor, lines, DecodeOptions(beam=beam, lenpen=args.lenpen,
                                                         lenpen_formula="fairseq"),
                    max_positions=max_positions)
            same = sum(a == b for a, b in zip(ours, ct2_outputs[beam]))
            print(f"{name} (alpha {args.lenpen}) vs CTranslate2 beam {beam} (|Y|^alpha): "
                  f"{same}/{len(lines)} identical lines ({100 * same / len(lines):.1f}%)",
                  flush=True)


if __name__ == "__main__":
    main()
