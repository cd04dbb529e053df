"""A CTranslate2 model directory from a vtx checkpoint, and translation with it (vtx's settings).

The model is described with CTranslate2's Transformer specification API: post-norm
(pre_norm=False), ReLU, embeddings scaled by sqrt(D), one embedding matrix shared by encoder,
decoder and output projection. Differences from CTranslate2's defaults that the weights carry:
  * vtx interleaves sin and cos (PE(pos, 2i) = sin, PE(pos, 2i + 1) = cos, the paper's formula);
    CTranslate2's built-in encodings concatenate them, so vtx's own table is stored explicitly;
  * vtx never generates PAD or BOS: the output projection gets a bias of NEVER_LOGIT on those
    two ids (0 elsewhere), so their probability is exactly 0 as in vtx's search;
  * Dense kernels are [in, out] in Keras and [out, in] in CTranslate2 (PyTorch's layout);
    queries, keys and values are fused into one matrix.
The vocabulary is the SentencePiece pieces in id order, so CTranslate2's ids equal vtx's: `<pad>`
0, `<unk>` 1, `<s>` 2 (decoding starts with it), `</s>` 3 (decoding ends at it). The SentencePiece
model is copied beside the weights as `sentencepiece.model`.

Shapes: D model width, F inner width, V vocabulary, P max positions.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

import numpy as np

from vtx.checkpoints import Checkpoint
from vtx.config import BOS_ID, PAD_ID, ModelConfig
from vtx.inference.decoding import DecodeOptions

SENTENCEPIECE_FILE = "sentencepiece.model"
# Added to the logits of PAD and BOS: exp() of it underflows to exactly 0 in float32 (and it still
# fits float16, should the model be quantized).
NEVER_LOGIT = -1e4


def _linear(spec, dense_layers) -> None:
    """Set a LinearSpec from Keras Dense layers (fused along the output axis when several)."""
    spec.weight = np.concatenate([d.kernel.numpy().T for d in dense_layers], axis=0)  # [out, in]
    spec.bias = np.concatenate([d.bias.numpy() for d in dense_layers], axis=0)


def _layer_norm(spec, norm) -> None:
    spec.gamma, spec.beta = norm.gamma.numpy(), norm.beta.numpy()


def _attention(spec, attention, norm, self_attention: bool) -> None:
    """Q, K, V fused [3D, D] (self) or Q [D, D] and K, V fused [2D, D] (cross); then output."""
    if self_attention:
        _linear(spec.linear[0], [attention.query_dense, attention.key_dense,
                                 attention.value_dense])
    else:
        _linear(spec.linear[0], [attention.query_dense])
        _linear(spec.linear[1], [attention.key_dense, attention.value_dense])
    _linear(spec.linear[-1], [attention.output_dense])
    _layer_norm(spec.layer_norm, norm)  # applied after the residual sum when pre_norm=False


def _feed_forward(spec, layer) -> None:
    _linear(spec.linear_0, [layer.feed_forward.inner])
    _linear(spec.linear_1, [layer.feed_forward.outer])
    _layer_norm(spec.layer_norm, layer.feed_forward_norm)


def position_table(model) -> np.ndarray:
    """float32 [P, D]: the model's own sinusoidal encodings for positions 0 .. P - 1."""
    probe = np.zeros((1, model.config.max_positions, model.config.d_model), np.float32)
    return np.asarray(model.position_encoding(probe), np.float32)


def transformer_spec(model, pieces: list[str]):
    """A `ctranslate2.specs.TransformerSpec` holding the weights of vtx Transformer `model`.

    Args:
        model: a vtx Transformer (float32) with its weights loaded.
        pieces: the V vocabulary pieces in id order.
    """
    from ctranslate2.specs import common_spec, transformer_spec as specs

    config: ModelConfig = model.config
    spec = specs.TransformerSpec.from_config(config.num_layers, config.num_heads, pre_norm=False,
                                             activation=common_spec.Activation.RELU)
    embeddings = model.embedding.embeddings.numpy()  # [V, D], shared three ways
    positions = position_table(model)
    for stack in (spec.encoder, spec.decoder):
        stack.scale_embeddings = True  # sqrt(D), as vtx's SharedEmbedding
        stack.position_encodings.encodings = positions
    spec.encoder.embeddings[0].weight = embeddings
    spec.decoder.embeddings.weight = embeddings
    spec.decoder.projection.weight = embeddings  # logits = h E^T: E is already [out=V, in=D]
    bias = np.zeros(config.vocab_size, np.float32)
    bias[[PAD_ID, BOS_ID]] = NEVER_LOGIT
    spec.decoder.projection.bias = bias
    for layer_spec, layer in zip(spec.encoder.layer, model.encoder_layers):
        _attention(layer_spec.self_attention, layer.self_attention, layer.attention_norm, True)
        _feed_forward(layer_spec.ffn, layer)
    for layer_spec, layer in zip(spec.decoder.layer, model.decoder_layers):
        _attention(layer_spec.self_attention, layer.self_attention, layer.attention_norm, True)
        _attention(layer_spec.attention, layer.cross_attention, layer.cross_attention_norm, False)
        _feed_forward(layer_spec.ffn, layer)
    spec.config.layer_norm_epsilon = config.layer_norm_epsilon
    spec.register_source_vocabulary(pieces)
    spec.register_target_vocabulary(pieces)
    return spec


def save_model(model, pieces: list[str], directory: str | Path) -> None:
    """Write vtx Transformer `model` with vocabulary `pieces` as a float32 CTranslate2 model.

    Raises:
        ValueError: the `ctranslate2` package is not installed (`pip install vtx[ctranslate2]`).
    """
    try:
        import ctranslate2  # noqa: F401
    except ImportError:
        raise ValueError("--format ctranslate2 needs the ctranslate2 package: "
                         "pip install 'vtx[ctranslate2]'") from None
    spec = transformer_spec(model, pieces)
    spec.validate()
    spec.optimize(quantization=None)  # aliases the shared embedding; keeps float32
    Path(directory).mkdir(parents=True)
    spec.save(str(directory))


def write_ctranslate2(checkpoint: Checkpoint, directory: str | Path) -> None:
    """Write `checkpoint` as a CTranslate2 model plus its SentencePiece model."""
    import sentencepiece

    from vtx.inference.loading import load_model

    processor = sentencepiece.SentencePieceProcessor(model_proto=checkpoint.vocab)
    pieces = [processor.id_to_piece(i) for i in range(processor.get_piece_size())]
    save_model(load_model(checkpoint), pieces, directory)
    (Path(directory) / SENTENCEPIECE_FILE).write_bytes(checkpoint.vocab)


def by_length_limit(lengths: list[int], options: DecodeOptions,
                    max_positions: int) -> list[tuple[int, list[int]]]:
    """(limit, indices) for each distinct `options.length_limit` of sources of `lengths` pieces,
    in increasing order, sources of no pieces left out (they translate to "")."""
    limits = [options.length_limit(length, max_positions) for length in lengths]
    wanted = [i for i, length in enumerate(lengths) if length]
    return [(limit, [i for i in wanted if limits[i] == limit])
            for limit in sorted({limits[i] for i in wanted})]


def translate_lines(translator, processor, lines: Iterable[str],
                    options: DecodeOptions = DecodeOptions(lenpen_formula="fairseq"),
                    max_positions: int = 1024, max_batch_size: int = 64,
                    batch_type: str = "examples") -> list[str]:
    """Translate with a loaded `ctranslate2.Translator` under vtx's conventions.

    Source pieces carry no BOS/EOS and are cut to `max_positions`; each sentence may produce at
    most `options.length_limit(|X|)` tokens (EOS included, as vtx counts |Y|); empty lines give
    "". CTranslate2's length penalty is |Y|^alpha: `options.lenpen_formula` must be `fairseq`
    when the beam is wider than 1 (a beam of 1 is greedy, where no penalty applies).

    Args:
        translator: a `ctranslate2.Translator` over a directory from `write_ctranslate2`.
        processor: a `sentencepiece.SentencePieceProcessor` of the same vocabulary.
        lines: source sentences.
        options: the search (vtx.inference.decoding); nbest, max_tokens and jit_compile unused.
        max_batch_size: CTranslate2's batches, in sentences or source tokens (`batch_type`:
            "examples" or "tokens").

    Returns:
        One detokenized translation per line.

    Raises:
        ValueError: a beam over 1 with the `gnmt` length penalty, which CTranslate2 lacks.
    """
    if options.beam > 1 and options.lenpen_formula != "fairseq":
        raise ValueError(f"CTranslate2 scores with |Y|^alpha (length penalty fairseq), not "
                         f"{options.lenpen_formula}")
    lines = list(lines)
    pieces = [processor.encode(line, out_type=str)[:max_positions] for line in lines]
    outputs = [""] * len(lines)
    # CTranslate2 takes one length limit per call: sentences of equal limit go together.
    for limit, group in by_length_limit([len(p) for p in pieces], options, max_positions):
        # Both stop after `limit` decoding steps, an EOS step included (vtx's |Y|).
        results = translator.translate_batch([pieces[i] for i in group], beam_size=options.beam,
                                             length_penalty=options.lenpen,
                                             max_decoding_length=limit,
                                             max_batch_size=max_batch_size,
                                             batch_type=batch_type)
        for index, result in zip(group, results):
            outputs[index] = processor.decode_pieces(result.hypotheses[0])
    return outputs
