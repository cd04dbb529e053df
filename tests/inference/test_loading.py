"""Decoding in bfloat16 and int8 against float32 on the trained fixture model
(`vtx.inference.loading`, `vtx.precision`)."""

import gzip

import pytest
import sacrebleu

from vtx.inference.decoding import DecodeOptions
from vtx.inference.loading import INT8_LAYERS, load_models
from vtx.inference.translator import Translator
from vtx.precision import DecodingPrecision

LINES = 150
# BLEU points against the references that bfloat16 or int8 may lose to float32: the tiny
# model's BLEU (about 13) moves by up to half a point from a few changed lines.
BLEU_TOLERANCE = 1.0


@pytest.fixture(scope="module")
def validation(shared_data):
    """The first LINES Multi30k validation sources and references."""
    read = lambda lang: [line.rstrip("\n") for line in gzip.open(
        shared_data / "multi30k" / f"val.{lang}.gz", "rt")][:LINES]
    return read("en"), read("de")


def translated(checkpoint, lines, precision: DecodingPrecision) -> tuple[list[str], list]:
    models, vocab = load_models([checkpoint], precision=precision)
    translator = Translator(models, vocab, DecodeOptions(beam=4, max_tokens=2048))
    return [found[0].text for found in translator.translate(lines)], models


@pytest.fixture(scope="module")
def float32_bleu(trained_checkpoint, validation):
    sources, references = validation
    outputs, _ = translated(trained_checkpoint, sources, DecodingPrecision())
    return sacrebleu.corpus_bleu(outputs, [references]).score, outputs


@pytest.mark.parametrize("precision", [DecodingPrecision("mixed_bfloat16"),
                                       DecodingPrecision("float32", "int8")],
                         ids=["bfloat16", "int8"])
def test_bfloat16_and_int8_translate_within_the_tolerance_of_float32(
        trained_checkpoint, validation, float32_bleu, precision):
    sources, references = validation
    outputs, models = translated(trained_checkpoint, sources, precision)
    bleu = sacrebleu.corpus_bleu(outputs, [references]).score
    assert abs(bleu - float32_bleu[0]) <= BLEU_TOLERANCE, (bleu, float32_bleu[0])
    # Most lines come out as in float32: the search itself is unchanged.
    assert sacrebleu.corpus_bleu(outputs, [float32_bleu[1]]).score > 60
    model = models[0]
    assert model.dtype_policy.name == precision.policy
    modes = {layer.name: layer.quantization_mode for layer in model._flatten_layers()
             if hasattr(layer, "quantization_mode")}
    quantized = {name for name, mode in modes.items() if mode == "int8"}
    assert quantized == (set(INT8_LAYERS) if precision.quantize == "int8" else set())
    assert model.embedding.embeddings.dtype == "float32"  # the logits' matrix stays float
