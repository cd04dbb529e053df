"""Fixtures for the export tests: the loaded translation model, test sentences, `vtx translate`."""

from pathlib import Path

import pytest
from click.testing import CliRunner

from vtx_cli.main import main


def invoke(*args) -> str:
    result = CliRunner().invoke(main, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return result.output


@pytest.fixture(scope="session")
def test_sentences(multi30k_small) -> list[str]:
    """The first 200 English sentences of Multi30k test_2016."""
    return (multi30k_small / "test_2016_flickr.en").read_text(encoding="utf-8").splitlines()


def vtx_translate(checkpoint: Path, lines: list[str], tmp_path: Path, *options) -> list[str]:
    """`vtx translate` of `lines`, one output line per input line, in float32 (what every
    export holds) unless `options` say otherwise: `--precision auto` computes in bfloat16 on a
    CPU that multiplies in it, and the outputs then differ from the exports' on some lines."""
    source, target = tmp_path / "source.txt", tmp_path / "vtx.txt"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    invoke("translate", "--checkpoint", checkpoint, "--input", source, "--output", target,
           "--precision", "float32", *options)
    return target.read_text(encoding="utf-8").split("\n")[:-1]


def greedy_margins(checkpoint: Path, lines: list[str]) -> list[float]:
    """Per line, the smallest gap between the best and the second-best logit along vtx's greedy
    path (inf for an empty line). Another implementation's float rounding (about 1e-5 here) can
    only flip a choice whose gap is smaller than that, so an equality of greedy outputs is decided
    by the model, not by the machine, on lines whose margin is well above it."""
    import numpy as np
    import tensorflow as tf

    from vtx.config import BOS_ID, EOS_ID, PAD_ID
    from vtx.inference import translate
    from vtx.inference.decoding import DecodeOptions
    from vtx.inference.model_search import output_length_limits
    from vtx.inference.translator import load_translator

    translator = load_translator(checkpoint, DecodeOptions(beam=1))
    encoded = [translator.encode(line, number) for number, line in enumerate(lines, 1)]
    source = np.full((len(lines), max(map(len, encoded)) or 1), PAD_ID, np.int32)  # [B, S]
    for row, ids in enumerate(encoded):
        source[row, :len(ids)] = ids
    source = tf.constant(source)
    max_length, limits = output_length_limits(source, 1.0, 50,
                                              translator.model.config.max_positions)
    state = translator.model.init_state(source, max_length)
    tokens = np.full(len(lines), BOS_ID, np.int32)  # [B]
    margins = np.where([bool(ids) for ids in encoded], np.inf, np.nan)  # nan: not searched
    done = np.isnan(margins)
    for step in range(max_length):
        logits, state = translator.model.decode_step(tf.constant(tokens), state)
        best_two = np.sort(logits.numpy(), axis=-1)[:, -2:]  # [B, 2]
        margins = np.where(done, margins, np.minimum(margins, best_two[:, 1] - best_two[:, 0]))
        tokens = logits.numpy().argmax(axis=-1).astype(np.int32)
        done |= (tokens == EOS_ID) | (step + 1 >= limits.numpy())
        if done.all():
            break
    return [float(m) if not np.isnan(m) else float("inf") for m in margins]
