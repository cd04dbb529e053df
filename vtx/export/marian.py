"""A Hugging Face Transformers MarianMT directory from a vtx checkpoint, and translation with it.

The paper's model is Marian's architecture (post-norm, ReLU, sinusoidal positions, one embedding
matrix scaled by sqrt(D) for encoder, decoder and output projection), so the weights map one to
one, with these conversions:
  * positions: vtx interleaves sin and cos (PE(pos, 2i) = sin, PE(pos, 2i + 1) = cos, the
    paper's formula); Marian puts the D / 2 sines first and the cosines after, and computes its
    table itself (it is not among the saved weights). The whole residual stream is therefore
    permuted: Marian's dimension m holds vtx's dimension `residual_permutation(D)[m]`, in the
    embeddings, every projection into or out of the stream and every layer norm's scale and
    shift. Attention heads and the feed-forward's inner units are not permuted; logits
    h E^T are unchanged, the permutation applying to both factors;
  * BOS: vtx starts decoding with `<s>` (id 2), Marian with the pad id: `decoder_start_token_id`
    is set to 2;
  * PAD and BOS are never generated: as vtx's search, their log-probabilities are removed after
    the softmax (`suppress_tokens` of the generation config), and `final_logits_bias` is zero,
    so that the forward pass's log-probabilities are vtx's;
  * Keras Dense kernels are [in, out], PyTorch Linear weights [out, in].
Two differences are left, both said in docs/export.md: Marian's layer norms use epsilon 1e-5
(fixed in its code; vtx's configuration says 1e-6), and MarianTokenizer appends `</s>` to every
source, which vtx never does (call it with `add_special_tokens=False` to get vtx's source ids).

The vocabulary is the SentencePiece pieces in id order (`vocab.json`), the SentencePiece model
copied as `source.spm` and `target.spm`, so that MarianTokenizer's ids equal vtx's.

Shapes: D model width, F inner width, V vocabulary.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable

import numpy as np

from vtx.checkpoints import Checkpoint
from vtx.config import BOS_ID, EOS_ID, PAD_ID, ModelConfig
from vtx.inference.decoding import DecodeOptions

# Marian's layer norms are `torch.nn.LayerNorm(D)`, whose epsilon its configuration cannot set.
MARIAN_LAYER_NORM_EPSILON = 1e-5
SENTENCEPIECE_FILES = ("source.spm", "target.spm")
VOCABULARY_FILE = "vocab.json"


def residual_permutation(d_model: int) -> np.ndarray:
    """int [D]: Marian's dimension m holds vtx's dimension `perm[m]` (the even ones, the sines,
    then the odd ones, the cosines), so that vtx's interleaved encodings become Marian's."""
    return np.concatenate([np.arange(0, d_model, 2), np.arange(1, d_model, 2)])


def marian_config(config: ModelConfig) -> dict:
    """The `transformers.MarianConfig` arguments of a vtx model configuration."""
    return dict(
        vocab_size=config.vocab_size, decoder_vocab_size=config.vocab_size,
        max_position_embeddings=config.max_positions, d_model=config.d_model,
        encoder_layers=config.num_layers, decoder_layers=config.num_layers,
        encoder_ffn_dim=config.d_ff, decoder_ffn_dim=config.d_ff,
        encoder_attention_heads=config.num_heads, decoder_attention_heads=config.num_heads,
        activation_function="relu", scale_embedding=True, dropout=config.dropout,
        attention_dropout=config.attention_dropout, activation_dropout=config.relu_dropout,
        pad_token_id=PAD_ID, eos_token_id=EOS_ID, bos_token_id=BOS_ID,
        decoder_start_token_id=BOS_ID,
        # Marian's default forces EOS at the length limit; vtx returns the cut hypothesis.
        forced_eos_token_id=None, share_encoder_decoder_embeddings=True,
        tie_word_embeddings=True, architectures=["MarianMTModel"])


def _linear(prefix: str, dense, perm: np.ndarray, into_stream: bool, from_stream: bool) -> dict:
    """A Keras Dense layer as `{prefix}.weight` [out, in] and `{prefix}.bias` [out], its input
    dimensions permuted when it reads the residual stream, its outputs when it writes to it."""
    weight = dense.kernel.numpy().T  # [out, in]
    bias = dense.bias.numpy()
    if from_stream:
        weight = weight[:, perm]
    if into_stream:
        weight, bias = weight[perm, :], bias[perm]
    return {f"{prefix}.weight": weight, f"{prefix}.bias": bias}


def _norm(prefix: str, norm, perm: np.ndarray) -> dict:
    return {f"{prefix}.weight": norm.gamma.numpy()[perm], f"{prefix}.bias": norm.beta.numpy()[perm]}


def _attention(prefix: str, attention, perm: np.ndarray) -> dict:
    state = {}
    for name, dense in (("q_proj", attention.query_dense), ("k_proj", attention.key_dense),
                        ("v_proj", attention.value_dense)):
        state.update(_linear(f"{prefix}.{name}", dense, perm, False, True))
    state.update(_linear(f"{prefix}.out_proj", attention.output_dense, perm, True, False))
    return state


def _feed_forward(prefix: str, layer, perm: np.ndarray) -> dict:
    return {**_linear(f"{prefix}.fc1", layer.feed_forward.inner, perm, False, True),
            **_linear(f"{prefix}.fc2", layer.feed_forward.outer, perm, True, False),
            **_norm(f"{prefix}.final_layer_norm", layer.feed_forward_norm, perm)}


def marian_state_dict(model) -> dict[str, np.ndarray]:
    """float32 arrays named as `MarianMTModel.state_dict()` names them, from vtx Transformer
    `model` (the tied embeddings once, as `model.shared.weight`; positions and the logits bias
    are Marian's own)."""
    perm = residual_permutation(model.config.d_model)
    state = {"model.shared.weight": model.embedding.embeddings.numpy()[:, perm]}  # [V, D]
    for i, layer in enumerate(model.encoder_layers):
        prefix = f"model.encoder.layers.{i}"
        state.update(_attention(f"{prefix}.self_attn", layer.self_attention, perm))
        state.update(_norm(f"{prefix}.self_attn_layer_norm", layer.attention_norm, perm))
        state.update(_feed_forward(prefix, layer, perm))
    for i, layer in enumerate(model.decoder_layers):
        prefix = f"model.decoder.layers.{i}"
        state.update(_attention(f"{prefix}.self_attn", layer.self_attention, perm))
        state.update(_norm(f"{prefix}.self_attn_layer_norm", layer.attention_norm, perm))
        state.update(_attention(f"{prefix}.encoder_attn", layer.cross_attention, perm))
        state.update(_norm(f"{prefix}.encoder_attn_layer_norm", layer.cross_attention_norm,
                           perm))
        state.update(_feed_forward(prefix, layer, perm))
    return {name: np.ascontiguousarray(array, np.float32) for name, array in state.items()}


# Marian's own tensors, not vtx weights: its sinusoidal tables, the logits bias (zero here), and
# the aliases of the one shared embedding matrix.
_MARIAN_OWN = ("model.encoder.embed_positions.weight", "model.decoder.embed_positions.weight",
               "final_logits_bias", "model.encoder.embed_tokens.weight",
               "model.decoder.embed_tokens.weight", "lm_head.weight")


def load_state(marian, state: dict[str, np.ndarray]) -> None:
    """Copy `state` (`marian_state_dict`) into `transformers.MarianMTModel` `marian`.

    Raises:
        ValueError: a name the model lacks or leaves unset, or a shape that differs from the
            model's (each named with both shapes).
    """
    import torch

    expected = {name: tuple(tensor.shape) for name, tensor in marian.state_dict().items()
                if name not in _MARIAN_OWN}
    problems = [f"{name}: vtx gives {array.shape}, MarianMTModel expects {expected[name]}"
                for name, array in state.items()
                if name in expected and tuple(array.shape) != expected[name]]
    problems += [f"{name}: not a MarianMTModel weight" for name in state if name not in expected]
    problems += [f"{name}: no vtx weight for it" for name in expected if name not in state]
    if problems:
        raise ValueError("the checkpoint's weights do not fit the MarianMTModel of its "
                         "configuration: " + "; ".join(sorted(problems)))
    tensors = {name: torch.from_numpy(array) for name, array in state.items()}
    marian.load_state_dict(tensors, strict=False)
    with torch.no_grad():
        marian.final_logits_bias.zero_()


def generation_config(config: ModelConfig):
    """A `transformers.GenerationConfig` with vtx's conventions: BOS starts, EOS ends, PAD and
    BOS never generated, no forced EOS at the limit; beam 4 and length penalty |Y|^0.6 stopping
    once 4 hypotheses finished (vtx's `--lenpen-formula fairseq --stop fairseq`: Transformers
    has no GNMT penalty), at most as many tokens as the model has positions."""
    from transformers import GenerationConfig

    return GenerationConfig(decoder_start_token_id=BOS_ID, bos_token_id=BOS_ID,
                            eos_token_id=EOS_ID, pad_token_id=PAD_ID,
                            suppress_tokens=[PAD_ID, BOS_ID], forced_eos_token_id=None,
                            num_beams=4, length_penalty=0.6, early_stopping=True,
                            max_length=config.max_positions + 1)


def _write_tokenizer(vocab_bytes: bytes, pieces: list[str], directory: Path,
                     max_positions: int) -> None:
    """source.spm, target.spm, vocab.json and the tokenizer's configuration, as MarianTokenizer
    writes them."""
    from transformers import MarianTokenizer

    for name in SENTENCEPIECE_FILES:
        (directory / name).write_bytes(vocab_bytes)
    vocabulary = {piece: index for index, piece in enumerate(pieces)}
    (directory / VOCABULARY_FILE).write_text(json.dumps(vocabulary, ensure_ascii=False, indent=1),
                                             encoding="utf-8")
    tokenizer = MarianTokenizer(source_spm=str(directory / SENTENCEPIECE_FILES[0]),
                                target_spm=str(directory / SENTENCEPIECE_FILES[1]),
                                vocab=str(directory / VOCABULARY_FILE), unk_token="<unk>",
                                eos_token="</s>", pad_token="<pad>", bos_token="<s>",
                                model_max_length=max_positions,
                                clean_up_tokenization_spaces=False)
    tokenizer.save_pretrained(str(directory))


def write_marian(checkpoint: Checkpoint, directory: str | Path) -> None:
    """Write `checkpoint` (with its vocabulary) as a MarianMTModel directory: config.json,
    generation_config.json, model.safetensors and the tokenizer's files.

    Raises:
        ValueError: `transformers` is not installed (`pip install 'vtx[transformers]'`), or the
            weights do not fit (`load_state`).
    """
    try:
        from transformers import MarianConfig, MarianMTModel
    except ImportError:
        raise ValueError("--format transformers needs the transformers package (and PyTorch): "
                         "pip install 'vtx[transformers]'") from None
    import sentencepiece

    from vtx.inference.translate import load_model

    model = load_model(checkpoint)
    marian = MarianMTModel(MarianConfig(**marian_config(model.config)))
    load_state(marian, marian_state_dict(model))
    marian.generation_config = generation_config(model.config)
    directory = Path(directory)
    directory.mkdir(parents=True)
    marian.save_pretrained(str(directory))
    processor = sentencepiece.SentencePieceProcessor(model_proto=checkpoint.vocab)
    pieces = [processor.id_to_piece(i) for i in range(processor.get_piece_size())]
    _write_tokenizer(checkpoint.vocab, pieces, directory, model.config.max_positions)


def translate_lines(marian, tokenizer, lines: Iterable[str],
                    options: DecodeOptions = DecodeOptions(lenpen_formula="fairseq",
                                                           stop="fairseq"),
                    max_batch_size: int = 64) -> list[str]:
    """Translate with a loaded MarianMTModel and MarianTokenizer under vtx's conventions.

    Sources carry no EOS (`add_special_tokens=False`) and are cut to the model's positions;
    each sentence may produce at most `options.length_limit(|X|)` tokens (EOS included, as vtx
    counts |Y|; sentences of one limit are translated together); lines of no pieces give "".
    Transformers scores a hypothesis with |Y|^alpha and, with `early_stopping=True`, stops once
    `beam` hypotheses have finished: a beam over 1 needs `lenpen_formula="fairseq"` and
    `stop="fairseq"`.

    Args:
        marian: a `transformers.MarianMTModel` from `write_marian`'s directory.
        tokenizer: the `transformers.MarianTokenizer` of the same directory.
        lines: source sentences.
        options: the search (vtx.inference.decoding); nbest, max_tokens and jit_compile unused.

    Returns:
        One detokenized translation per line.

    Raises:
        ValueError: a beam over 1 with another length penalty or stop rule.
    """
    import torch

    from vtx.export.ct2 import by_length_limit

    if options.beam > 1 and (options.lenpen_formula, options.stop) != ("fairseq", "fairseq"):
        raise ValueError(f"Transformers scores with |Y|^alpha and stops once the beam has "
                         f"finished (lenpen_formula and stop fairseq), not "
                         f"{options.lenpen_formula} and {options.stop}")
    lines = list(lines)
    positions = marian.config.max_position_embeddings
    ids = [tokenizer(line, add_special_tokens=False)["input_ids"][:positions] for line in lines]
    outputs = [""] * len(lines)
    for limit, group in by_length_limit([len(i) for i in ids], options, positions):
        for start in range(0, len(group), max_batch_size):
            rows = group[start:start + max_batch_size]
            batch = tokenizer.pad({"input_ids": [ids[i] for i in rows]}, return_tensors="pt")
            # max_length counts the decoder's start token; beam settings only for a beam.
            search = dict(num_beams=1) if options.beam == 1 else dict(
                num_beams=options.beam, length_penalty=options.lenpen, early_stopping=True)
            with torch.no_grad():
                generated = marian.generate(**batch, max_length=limit + 1, **search)
            texts = tokenizer.batch_decode(generated, skip_special_tokens=True)
            for index, text in zip(rows, texts):
                outputs[index] = text
    return outputs
