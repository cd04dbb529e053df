"""vtx's Transformer as a keras-hub Seq2SeqLM whose `generate()` is vtx's own beam search.

keras-hub's samplers see one step's logits at a time and keep no set of finished hypotheses
nor a length penalty, so they cannot give the paper's search; the task overrides
`generate_step` (keras-hub's per-model hook) with `vtx.inference.model_search.search_for`, the
search `vtx translate` runs: GNMT or fairseq length penalty, the limit a * |X| + b, cached
decoding, the same stop rules.

Shapes: B batch, S source length, T decoder length, L output limit, V vocabulary.
"""

from __future__ import annotations

import dataclasses

import keras
import tensorflow as tf
from keras_hub.models import Seq2SeqLM

from vtx.config import BOS_ID, EOS_ID, PAD_ID
from vtx.hub.backbone import TransformerBackbone
from vtx.hub.preprocessor import TransformerSeq2SeqLMPreprocessor
from vtx.inference.decoding import LENGTH_BUCKET, TRANSLATION, DecodeOptions

# The settings of DecodeOptions a task keeps (its constructor's arguments).
SEARCH_SETTINGS = ("beam", "lenpen", "lenpen_formula", "max_len_a", "max_len_b", "stop")


class _Logits(keras.layers.Layer):
    """Decoder states [B, T, D] -> logits [B, T, V] by the shared embedding matrix."""

    def __init__(self, embedding, **kwargs):
        super().__init__(**kwargs)
        self.embedding = embedding

    def call(self, hidden):
        return self.embedding.project(hidden)


@keras.saving.register_keras_serializable(package="vtx")
class TransformerSeq2SeqLM(Seq2SeqLM):
    """Translation with a vtx model: `generate(["A man."])` returns what `vtx translate` returns
    with the same search settings.

    Calling the model (or `fit`) gives logits [B, T, V] of teacher-forced targets. `generate`
    ignores keras-hub samplers (`compile(sampler=...)` is refused) and a decoder prompt; its
    output length is each sentence's limit max_len_a * |X| + max_len_b.

    Args:
        backbone: a `TransformerBackbone`.
        preprocessor: a `TransformerSeq2SeqLMPreprocessor`, or None.
        beam, lenpen, lenpen_formula, max_len_a, max_len_b, stop: the search
            (`vtx.inference.decoding.DecodeOptions`); the defaults are the paper's.
    """

    backbone_cls = TransformerBackbone
    preprocessor_cls = TransformerSeq2SeqLMPreprocessor

    def __init__(self, backbone: TransformerBackbone, preprocessor=None,
                 beam: int = TRANSLATION.beam, lenpen: float = TRANSLATION.lenpen,
                 lenpen_formula: str = TRANSLATION.lenpen_formula,
                 max_len_a: float = TRANSLATION.max_len_a,
                 max_len_b: int = TRANSLATION.max_len_b, stop: str = TRANSLATION.stop,
                 **kwargs):
        self.backbone = backbone
        self.preprocessor = preprocessor
        inputs = backbone.input
        hidden = backbone(inputs)["decoder_sequence_output"]
        outputs = _Logits(backbone.transformer.embedding, dtype=backbone.dtype_policy,
                          name="logits")(hidden)
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)
        self.decode_options = DecodeOptions(beam=beam, lenpen=lenpen,
                                            lenpen_formula=lenpen_formula, max_len_a=max_len_a,
                                            max_len_b=max_len_b, stop=stop)

    @property
    def decode_options(self) -> DecodeOptions:
        """The search `generate` runs; set it to change it."""
        return self._decode_options

    @decode_options.setter
    def decode_options(self, options: DecodeOptions) -> None:
        from vtx.inference.model_search import search_for

        self._decode_options = dataclasses.replace(options, nbest=1, jit_compile=False,
                                                   constrain_trees=False)
        self._search = search_for(self.backbone.transformer, self._decode_options)
        self.generate_function = None

    def compile(self, optimizer="auto", loss="auto", *, weighted_metrics="auto", sampler=None,
                **kwargs):
        """`keras_hub.models.Seq2SeqLM.compile` for training; `sampler` must stay None.

        Raises:
            ValueError: a sampler is given (generate runs vtx's search: set `decode_options`).
        """
        if sampler is not None:
            raise ValueError(f"TransformerSeq2SeqLM generates with vtx's beam search, not a "
                             f"keras-hub sampler (got sampler={sampler!r}); set decode_options "
                             f"(e.g. vtx.inference.decoding.DecodeOptions(beam=1) for greedy)")
        super().compile(optimizer, loss, weighted_metrics=weighted_metrics, sampler="greedy",
                        **kwargs)
        self.sampler = None

    def make_generate_function(self):
        # The search is a tf.function traced once for any shape already; keras-hub's own
        # wrapper would compile it with XLA, which its growing cache rules out.
        self.generate_function = self.generate_step
        return self.generate_function

    def generate(self, inputs, max_length=None, stop_token_ids="auto", strip_prompt=False):
        """Translate `inputs` (a string, a list of them or a `tf.data.Dataset`).

        Raises:
            ValueError: `max_length` is given: the search's limit is max_len_a * |X| +
                max_len_b (`decode_options`).
        """
        if max_length is not None:
            raise ValueError(f"max_length={max_length}: the output's limit is max_len_a * |X| "
                             f"+ max_len_b of decode_options ({self.decode_options.max_len_a}, "
                             f"{self.decode_options.max_len_b}); set those instead")
        return super().generate(inputs, stop_token_ids=stop_token_ids,
                                strip_prompt=strip_prompt)

    def generate_step(self, inputs, stop_token_ids=None):
        """vtx's search over a batch of `generate_preprocess` outputs.

        Args:
            inputs: dict of "encoder_token_ids" and "encoder_padding_mask" [B, S], and the
                decoder's, which must hold `<s>` alone (the search starts there).
            stop_token_ids: unused (the search ends at `</s>`).

        Returns:
            dict of "decoder_token_ids" int32 [B, L + 2] (`<s>`, tokens, `</s>` where finished,
            `<pad>`) and "decoder_padding_mask" bool [B, L + 2]; a source of no pieces gives
            no tokens (""), as `vtx translate` gives.

        Raises:
            ValueError: a decoder prompt (vtx's search does not continue one).
        """
        prompt = tf.reduce_sum(tf.cast(inputs["decoder_padding_mask"], tf.int32), axis=1)
        if bool(tf.reduce_any(prompt > 1)):
            raise ValueError("TransformerSeq2SeqLM translates from <s>: give the sources alone, "
                             "without a decoder prompt (decoder_text)")
        source = _trimmed_source(inputs["encoder_token_ids"], inputs["encoder_padding_mask"])
        output = self._search(source)
        tokens, lengths = output.tokens[:, 0, :], output.lengths[:, 0]  # [B, L], [B]
        rows = tf.shape(tokens)[0]
        column = lambda value: tf.fill([rows, 1], tf.constant(value, tf.int32))  # noqa: E731
        ids = tf.concat([column(BOS_ID), tokens, column(PAD_ID)], axis=1)  # [B, L + 2]
        positions = tf.range(tf.shape(ids)[1])[None, :]
        ends = (lengths + 1)[:, None]
        finished = output.finished[:, :1]
        ids = tf.where(tf.logical_and(positions == ends, finished), EOS_ID, ids)
        blank = tf.reduce_all(source == PAD_ID, axis=1, keepdims=True)  # [B, 1]
        mask = tf.logical_and(positions <= ends + tf.cast(finished, tf.int32) - 1,
                              tf.logical_not(blank))
        return {"decoder_token_ids": ids, "decoder_padding_mask": mask}

    def get_config(self):
        options = self.decode_options
        return {**super().get_config(),
                **{name: getattr(options, name) for name in SEARCH_SETTINGS}}


def _trimmed_source(token_ids, padding_mask):
    """int [B, S] ids, PAD where the mask is False, cut to the longest row rounded up to a
    multiple of LENGTH_BUCKET (at least one): the shapes `vtx translate` searches."""
    ids = tf.where(tf.cast(padding_mask, tf.bool), tf.cast(token_ids, tf.int32), PAD_ID)
    longest = tf.reduce_max(tf.reduce_sum(tf.cast(ids != PAD_ID, tf.int32), axis=1))
    width = tf.maximum(1, (longest + LENGTH_BUCKET - 1) // LENGTH_BUCKET) * LENGTH_BUCKET
    width = tf.minimum(width, tf.shape(ids)[1])
    return ids[:, :width]
