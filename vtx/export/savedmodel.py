"""A TensorFlow SavedModel that translates raw strings: tokenize, search, detokenize in one graph.

The serving signature `serving_default` takes `inputs`, string [B], and returns `translations`,
string [B], and `scores`, float32 [B] (log P(Y | X) / lp(|Y|)). SentencePiece runs through
tensorflow-text's `SentencepieceTokenizer` (the model bytes are stored in the graph); the search is
vtx's own beam search traced for any B and S, so loading needs `tensorflow` and `tensorflow_text`
(which registers the SentencePiece op), not vtx:

    import tensorflow as tf, tensorflow_text  # noqa: F401
    translate = tf.saved_model.load(path).signatures["serving_default"]
    translate(inputs=tf.constant(["A man."]))["translations"]

It reproduces `vtx translate` with the same settings: source ids without BOS/EOS cut to the
model's positions, S padded to a multiple of LENGTH_BUCKET, a line of no pieces (empty, blank, a
zero-width space alone) translated to "". Shapes: B batch, S padded source length, L output limit.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import tensorflow as tf

from vtx.checkpoints import Checkpoint
from vtx.config import PAD_ID
from vtx.inference.decoding import LENGTH_BUCKET, DecodeOptions
from vtx.inference.loading import load_model
from vtx.precision import DecodingPrecision


class TranslateModule(tf.Module):
    """The exported object: the model's variables, the tokenizer, and the serving function.

    Args:
        model: a vtx Transformer with its weights loaded.
        sentencepiece_model: the serialized SentencePiece model of its vocabulary.
        options: decoding settings (nbest must be 1; max_tokens and jit_compile are unused).
    """

    def __init__(self, model, sentencepiece_model: bytes, options: DecodeOptions):
        import tensorflow_text

        from vtx.inference.model_search import search_for

        super().__init__(name="vtx_translate")
        if options.nbest != 1:
            raise ValueError(f"a SavedModel returns one translation per line, got nbest "
                             f"{options.nbest}")
        # Tracked here so that the saved graph keeps the variables it reads; the Keras model
        # itself stays in a closure, so the SavedModel holds no Keras objects.
        self.model_variables = list(model.variables)
        self.tokenizer = tensorflow_text.SentencepieceTokenizer(model=sentencepiece_model)
        self._max_positions = model.config.max_positions
        self._search = search_for(model, dataclasses.replace(options, nbest=1,
                                                             jit_compile=False))
        # Without AutoGraph, as vtx's other programs: no Python control flow on tensors here
        # either (the search calls tf.while_loop itself), and its rewrite would be most of the
        # trace.
        self.translate = tf.function(self._translate, autograph=False,
                                     input_signature=[tf.TensorSpec([None], tf.string)])

    def _source_ids(self, lines: tf.Tensor) -> tf.Tensor:
        """string [B] -> int32 [B, S]: pieces cut to the model's positions, PAD up to a multiple
        of LENGTH_BUCKET (at least one bucket), the padded shapes `vtx translate` uses."""
        pieces = self.tokenizer.tokenize(lines)[:, :self._max_positions]  # ragged [B, (len)]
        longest = tf.reduce_max(tf.concat([pieces.row_lengths(), [1]], axis=0))
        width = (longest + LENGTH_BUCKET - 1) // LENGTH_BUCKET * LENGTH_BUCKET
        batch = tf.shape(lines, out_type=tf.int64)[0]
        return tf.cast(pieces.to_tensor(default_value=PAD_ID, shape=tf.stack([batch, width])),
                       tf.int32)

    def _translate(self, inputs: tf.Tensor) -> dict[str, tf.Tensor]:
        """string [B] -> {"translations": string [B], "scores": float32 [B]}."""
        source = self._source_ids(inputs)
        output = self._search(source)
        lengths = output.lengths[:, 0]  # [B]
        pieces = tf.RaggedTensor.from_tensor(output.tokens[:, 0, :], lengths=lengths)
        text = self.tokenizer.detokenize(pieces)
        # A line of no pieces (empty, blank, a zero-width space alone) is "", as in `vtx
        # translate`: its search, from padding only, would make a sentence up.
        blank = tf.reduce_all(source == PAD_ID, axis=1)
        return {"translations": tf.where(blank, tf.constant(""), text),
                "scores": tf.where(blank, tf.constant(0.0), output.scores[:, 0])}


def write_savedmodel(checkpoint: Checkpoint, directory: str | Path, options: DecodeOptions,
                     precision: DecodingPrecision = DecodingPrecision()) -> None:
    """Write `checkpoint` (with its vocabulary) as a translating SavedModel in `directory`, its
    model built in `precision` (`vtx.inference.loading.load_model`)."""
    model = load_model(checkpoint, precision.policy, quantize=precision.quantize)
    module = TranslateModule(model, checkpoint.vocab, options)
    tf.saved_model.save(module, str(directory),
                        signatures={"serving_default": module.translate})
