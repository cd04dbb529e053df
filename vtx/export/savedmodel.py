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
zero-width space alone) translated to "". An imported model's vocabulary (`vtx.data.pair_vocab`:
a source and a target SentencePiece model and an id table) is read in the graph as in Python:
a leading `>>xxx<<` token as one piece, the source model's pieces looked up in the table (unk
where it lacks them), the source suffix (`</s>`) appended; outputs joined by the target model,
special ids dropped. Shapes: B batch, S padded source length, L output limit.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import tensorflow as tf

from vtx.checkpoints import Checkpoint
from vtx.config import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from vtx.inference.decoding import LENGTH_BUCKET, DecodeOptions
from vtx.inference.loading import load_model
from vtx.precision import DecodingPrecision


# What Python's str.strip() strips (every character whose isspace() is true), in RE2's syntax:
# `vtx translate` gives no translation to a line that strips to nothing.
BLANK_LINE = (r"[\t\n\x0b\x0c\r\x1c-\x1f \x{85}\x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}"
              r"\x{2029}\x{202f}\x{205f}\x{3000}]*")
# A leading target-language token (`>>deu<<`), as `PairVocabulary.encode_source` finds it.
LANGUAGE_TOKEN = r"(?s)^(>>.*?<<)"


class SentencePieceText(tf.Module):
    """vtx's own vocabulary in the graph: one SentencePiece model, whose ids are the model's."""

    def __init__(self, model: bytes):
        import tensorflow_text

        super().__init__(name="sentencepiece_text")
        self.tokenizer = tensorflow_text.SentencepieceTokenizer(model=model)

    def source_ids(self, lines: tf.Tensor) -> tf.RaggedTensor:
        """string [B] -> int32 [B, (pieces)]."""
        return self.tokenizer.tokenize(lines)

    def no_pieces(self, lines: tf.Tensor, ids: tf.RaggedTensor) -> tf.Tensor:
        """bool [B]: the lines `vtx translate` gives no translation (no pieces)."""
        return ids.row_lengths() == 0

    def text(self, ids: tf.RaggedTensor) -> tf.Tensor:
        """int32 [B, (tokens)] -> string [B]."""
        return self.tokenizer.detokenize(ids)


class PairText(tf.Module):
    """An imported model's `PairVocabulary` in the graph (the module docstring)."""

    def __init__(self, vocab):
        import tensorflow_text

        super().__init__(name="pair_text")
        source, target = vocab.models
        # Named apart: a loaded SavedModel gives two SentencePiece ops of one name one model.
        self.source = tensorflow_text.SentencepieceTokenizer(model=source, out_type=tf.string,
                                                             name="source_sentencepiece")
        self.target = tensorflow_text.SentencepieceTokenizer(model=target,
                                                             name="target_sentencepiece")
        pieces = vocab.pieces_in_order
        self.ids = tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(
            tf.constant(pieces), tf.range(len(pieces), dtype=tf.int32)), default_value=UNK_ID)
        self.target_ids = tf.constant(vocab.target_model_ids(), tf.int32)  # [V]
        self.suffix = tf.constant(vocab.source_suffix, tf.int32, shape=[len(vocab.source_suffix)])

    def source_ids(self, lines: tf.Tensor) -> tf.RaggedTensor:
        """string [B] -> int32 [B, (pieces)]: `PairVocabulary.encode_source` of each line."""
        coded = tf.strings.regex_full_match(lines, LANGUAGE_TOKEN + ".*")  # [B]
        code = tf.strings.regex_replace(tf.boolean_mask(lines, coded), LANGUAGE_TOKEN + ".*",
                                        r"\1")
        rest = tf.where(coded, tf.strings.regex_replace(lines, LANGUAGE_TOKEN, "",
                                                        replace_global=False), lines)
        codes = tf.RaggedTensor.from_row_lengths(code, tf.cast(coded, tf.int64))
        pieces = tf.concat([codes, self.source.tokenize(rest)], axis=1)  # string [B, (n)]
        batch = tf.shape(lines)[0]
        suffix = tf.RaggedTensor.from_tensor(tf.tile(self.suffix[None, :], [batch, 1]))
        return tf.concat([tf.ragged.map_flat_values(self.ids.lookup, pieces), suffix], axis=1)

    def no_pieces(self, lines: tf.Tensor, ids: tf.RaggedTensor) -> tf.Tensor:
        """bool [B]: the lines `vtx translate` gives no translation: blank, or the suffix
        alone."""
        return (tf.strings.regex_full_match(lines, BLANK_LINE)
                | (ids.row_lengths() <= tf.cast(tf.size(self.suffix), tf.int64)))

    def text(self, ids: tf.RaggedTensor) -> tf.Tensor:
        """int32 [B, (tokens)] -> string [B]: `PairVocabulary.decode` of each row."""
        special = tf.reduce_any(ids.flat_values[:, None] == tf.constant(
            [PAD_ID, UNK_ID, BOS_ID, EOS_ID]), axis=1)
        kept = tf.ragged.boolean_mask(ids, ids.with_flat_values(~special))
        return self.target.detokenize(tf.ragged.map_flat_values(tf.gather, self.target_ids,
                                                                kept))


def vocabulary_text(vocab_bytes: bytes) -> tf.Module:
    """The graph's tokenizer of a checkpoint's vocabulary bytes: `PairText` for an imported
    model's, else `SentencePieceText`."""
    from vtx.data import pair_vocab

    if pair_vocab.is_pair_vocabulary(vocab_bytes):
        return PairText(pair_vocab.PairVocabulary.from_bytes(vocab_bytes, "the vocabulary"))
    return SentencePieceText(vocab_bytes)


class TranslateModule(tf.Module):
    """The exported object: the model's variables, the tokenizer, and the serving function.

    Args:
        model: a vtx Transformer with its weights loaded.
        vocab_bytes: its checkpoint's vocabulary (a SentencePiece model, or an imported
            model's pair vocabulary).
        options: decoding settings (nbest must be 1; max_tokens and jit_compile are unused).
    """

    def __init__(self, model, vocab_bytes: bytes, options: DecodeOptions):
        from vtx.inference.model_search import search_for

        super().__init__(name="vtx_translate")
        if options.nbest != 1:
            raise ValueError(f"a SavedModel returns one translation per line, got nbest "
                             f"{options.nbest}")
        # Tracked here so that the saved graph keeps the variables it reads; the Keras model
        # itself stays in a closure, so the SavedModel holds no Keras objects.
        self.model_variables = list(model.variables)
        self.tokenizer = vocabulary_text(vocab_bytes)
        self._max_positions = model.config.max_positions
        self._search = search_for(model, dataclasses.replace(options, nbest=1,
                                                             jit_compile=False))
        # Without AutoGraph, as vtx's other programs: no Python control flow on tensors here
        # either (the search calls tf.while_loop itself), and its rewrite would be most of the
        # trace.
        self.translate = tf.function(self._translate, autograph=False,
                                     input_signature=[tf.TensorSpec([None], tf.string)])

    def _source_ids(self, lines: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """string [B] -> (int32 [B, S]: pieces cut to the model's positions, PAD up to a
        multiple of LENGTH_BUCKET (at least one bucket), the padded shapes `vtx translate` uses;
        bool [B]: the lines of no pieces)."""
        pieces = self.tokenizer.source_ids(lines)[:, :self._max_positions]  # [B, (len)]
        longest = tf.reduce_max(tf.concat([pieces.row_lengths(), [1]], axis=0))
        width = (longest + LENGTH_BUCKET - 1) // LENGTH_BUCKET * LENGTH_BUCKET
        batch = tf.shape(lines, out_type=tf.int64)[0]
        ids = tf.cast(pieces.to_tensor(default_value=PAD_ID, shape=tf.stack([batch, width])),
                      tf.int32)
        return ids, self.tokenizer.no_pieces(lines, pieces)

    def _translate(self, inputs: tf.Tensor) -> dict[str, tf.Tensor]:
        """string [B] -> {"translations": string [B], "scores": float32 [B]}."""
        source, blank = self._source_ids(inputs)
        output = self._search(source)
        lengths = output.lengths[:, 0]  # [B]
        pieces = tf.RaggedTensor.from_tensor(output.tokens[:, 0, :], lengths=lengths)
        text = self.tokenizer.text(pieces)
        # A line of no pieces (empty, blank, a zero-width space alone) is "", as in `vtx
        # translate`: its search, from padding only, would make a sentence up.
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
