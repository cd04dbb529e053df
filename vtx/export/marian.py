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
source, which vtx never does: the tokenizer that `AutoTokenizer` loads from the directory
(`tokenizer.json`) appends nothing, and gives vtx's source ids by default.

The vocabulary is the SentencePiece pieces in id order (`vocab.json`), the SentencePiece model
copied as `source.spm` and `target.spm`, so that MarianTokenizer's ids equal vtx's. `read_marian`
converts such a directory back into a vtx checkpoint.

Shapes: D model width, F inner width, V vocabulary.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable

import numpy as np

from vtx import manifest
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
        tie_word_embeddings=True, architectures=["MarianMTModel"],
        # Not Marian's (its layer norms take MARIAN_LAYER_NORM_EPSILON): what `read_marian`
        # gives back to vtx, so that a round trip returns the configuration it started from.
        vtx_layer_norm_epsilon=config.layer_norm_epsilon)


# How a vtx array lies in Marian's: "embedding" [V, D] with its columns permuted; "reads" and
# "writes", a Keras kernel [in, out] transposed to [out, in], its inputs (it reads the residual
# stream) or its outputs (it writes to it) permuted; "stream", a vector [D] of the stream
# (layer norms, biases of what writes to it) permuted; "plain", unchanged.
LAYOUTS = ("embedding", "reads", "writes", "stream", "plain")


def to_marian(array: np.ndarray, layout: str, perm: np.ndarray) -> np.ndarray:
    """vtx's `array` laid out as Marian holds it (`LAYOUTS`)."""
    if layout == "embedding":
        return array[:, perm]
    if layout == "reads":
        return array.T[:, perm]
    if layout == "writes":
        return array.T[perm, :]
    return array[perm] if layout == "stream" else array


def from_marian(array: np.ndarray, layout: str, perm: np.ndarray) -> np.ndarray:
    """The inverse of `to_marian`: Marian's `array` as vtx holds it."""
    inverse = np.argsort(perm)
    if layout == "embedding":
        return array[:, inverse]
    if layout == "reads":
        return array[:, inverse].T
    if layout == "writes":
        return array[inverse, :].T
    return array[inverse] if layout == "stream" else array


def _dense(prefix: str, dense, writes: bool) -> list:
    return [(f"{prefix}.weight", dense.kernel, "writes" if writes else "reads"),
            (f"{prefix}.bias", dense.bias, "stream" if writes else "plain")]


def _norm(prefix: str, norm) -> list:
    return [(f"{prefix}.weight", norm.gamma, "stream"), (f"{prefix}.bias", norm.beta, "stream")]


def _attention(prefix: str, attention) -> list:
    return (_dense(f"{prefix}.q_proj", attention.query_dense, False)
            + _dense(f"{prefix}.k_proj", attention.key_dense, False)
            + _dense(f"{prefix}.v_proj", attention.value_dense, False)
            + _dense(f"{prefix}.out_proj", attention.output_dense, True))


def _feed_forward(prefix: str, layer) -> list:
    return (_dense(f"{prefix}.fc1", layer.feed_forward.inner, False)
            + _dense(f"{prefix}.fc2", layer.feed_forward.outer, True)
            + _norm(f"{prefix}.final_layer_norm", layer.feed_forward_norm))


def weight_map(model) -> list[tuple[str, object, str]]:
    """(name in `MarianMTModel.state_dict()`, vtx variable, layout) for every weight of vtx
    Transformer `model` (the tied embeddings once, as `model.shared.weight`; positions and the
    logits bias are Marian's own)."""
    entries = [("model.shared.weight", model.embedding.embeddings, "embedding")]
    for i, layer in enumerate(model.encoder_layers):
        prefix = f"model.encoder.layers.{i}"
        entries += (_attention(f"{prefix}.self_attn", layer.self_attention)
                    + _norm(f"{prefix}.self_attn_layer_norm", layer.attention_norm)
                    + _feed_forward(prefix, layer))
    for i, layer in enumerate(model.decoder_layers):
        prefix = f"model.decoder.layers.{i}"
        entries += (_attention(f"{prefix}.self_attn", layer.self_attention)
                    + _norm(f"{prefix}.self_attn_layer_norm", layer.attention_norm)
                    + _attention(f"{prefix}.encoder_attn", layer.cross_attention)
                    + _norm(f"{prefix}.encoder_attn_layer_norm", layer.cross_attention_norm)
                    + _feed_forward(prefix, layer))
    return entries


def marian_state_dict(model) -> dict[str, np.ndarray]:
    """float32 arrays named as `MarianMTModel.state_dict()` names them, from vtx Transformer
    `model` (`weight_map`)."""
    perm = residual_permutation(model.config.d_model)
    return {name: np.ascontiguousarray(to_marian(variable.numpy(), layout, perm), np.float32)
            for name, variable, layout in weight_map(model)}


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
    """MarianTokenizer's files (source.spm, target.spm, vocab.json) and the tokenizer that
    `AutoTokenizer` loads (tokenizer.json, tokenizer_config.json): the SentencePiece model as a
    `TokenizersBackend`, whose default call adds no special token, where MarianTokenizer's
    always appends `</s>` to a source."""
    import tempfile

    from transformers import TokenizersBackend

    for name in SENTENCEPIECE_FILES:
        (directory / name).write_bytes(vocab_bytes)
    vocabulary = {piece: index for index, piece in enumerate(pieces)}
    (directory / VOCABULARY_FILE).write_text(json.dumps(vocabulary, ensure_ascii=False, indent=1),
                                             encoding="utf-8")
    with tempfile.TemporaryDirectory() as scratch:
        # TokenizersBackend converts a SentencePiece model named by this suffix.
        model_file = Path(scratch) / "tokenizer.model"
        model_file.write_bytes(vocab_bytes)
        tokenizer = TokenizersBackend(**TokenizersBackend.convert_to_native_format(
            vocab_file=str(model_file), unk_token="<unk>", eos_token="</s>", pad_token="<pad>",
            bos_token="<s>", model_max_length=max_positions, clean_up_tokenization_spaces=False))
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

    from vtx.inference.loading import load_model

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
    """Translate with a loaded MarianMTModel and its tokenizer under vtx's conventions.

    Sources carry no EOS (`add_special_tokens=False`) and are cut to the model's positions;
    each sentence may produce at most `options.length_limit(|X|)` tokens (EOS included, as vtx
    counts |Y|; sentences of one limit are translated together); lines of no pieces give "".
    Transformers scores a hypothesis with |Y|^alpha and, with `early_stopping=True`, stops once
    `beam` hypotheses have finished: a beam over 1 needs `lenpen_formula="fairseq"` and
    `stop="fairseq"`.

    Args:
        marian: a `transformers.MarianMTModel` from `write_marian`'s directory.
        tokenizer: the tokenizer of the same directory (`AutoTokenizer`'s, or MarianTokenizer:
            sources are encoded without special tokens either way).
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


def vtx_config(marian_config) -> ModelConfig:
    """The vtx model configuration of a `transformers.MarianConfig` of vtx's architecture.

    Raises:
        ValueError: a setting vtx's model has no counterpart for (each named with its value).
    """
    wanted = {"activation_function": "relu", "scale_embedding": True,
              "share_encoder_decoder_embeddings": True, "pad_token_id": PAD_ID,
              "eos_token_id": EOS_ID, "decoder_start_token_id": BOS_ID,
              "decoder_layers": marian_config.encoder_layers,
              "decoder_ffn_dim": marian_config.encoder_ffn_dim,
              "decoder_attention_heads": marian_config.encoder_attention_heads,
              "decoder_vocab_size": marian_config.vocab_size}
    problems = [f"{name} {getattr(marian_config, name)!r} (vtx needs {value!r})"
                for name, value in wanted.items() if getattr(marian_config, name) != value]
    if problems:
        raise ValueError("not a MarianMTModel of vtx's architecture: " + "; ".join(problems))
    return ModelConfig(
        vocab_size=marian_config.vocab_size, num_layers=marian_config.encoder_layers,
        d_model=marian_config.d_model, d_ff=marian_config.encoder_ffn_dim,
        num_heads=marian_config.encoder_attention_heads, dropout=marian_config.dropout,
        attention_dropout=marian_config.attention_dropout,
        relu_dropout=marian_config.activation_dropout,
        max_positions=marian_config.max_position_embeddings,
        layer_norm_epsilon=getattr(marian_config, "vtx_layer_norm_epsilon",
                                   MARIAN_LAYER_NORM_EPSILON))


def read_marian(directory: str | Path) -> Checkpoint:
    """A vtx checkpoint (step 0, no optimizer state) of a MarianMTModel directory of vtx's
    architecture and vocabulary conventions, such as `write_marian` writes: the inverse
    conversion, exact (`write_marian` then `read_marian` gives the weights, configuration and
    vocabulary back). A model trained in Transformers keeps Marian's layer-norm epsilon.

    Raises:
        ManifestError: a vtx export that changed since it was written (the file named).
        ValueError: an architecture or vocabulary vtx's model lacks (`vtx_config`; special ids,
            `vocab.json` not in the SentencePiece model's id order, a non-zero
            `final_logits_bias`), or weights of other shapes; each named.
    """
    from transformers import MarianMTModel

    from vtx.data.vocab import Vocabulary
    from vtx.models.transformer import build

    directory = Path(directory)
    # A vtx export is checked against its manifest; a directory without one (a model trained
    # in Transformers; a hub cache's snapshot, whose files are links to blobs beside it) is not.
    if (directory / manifest.NAME).is_file():
        manifest.verify(directory)
    marian = MarianMTModel.from_pretrained(str(directory), local_files_only=True)
    config = vtx_config(marian.config)
    vocab_bytes = (directory / SENTENCEPIECE_FILES[0]).read_bytes()
    vocab = Vocabulary.from_bytes(vocab_bytes, str(directory / SENTENCEPIECE_FILES[0]))
    vocabulary = json.loads((directory / VOCABULARY_FILE).read_text(encoding="utf-8"))
    if vocabulary != {piece: i for i, piece in enumerate(vocab.pieces(range(vocab.size)))}:
        raise ValueError(f"{directory / VOCABULARY_FILE}: its ids are not the SentencePiece "
                         f"model's (vtx reads ids from {SENTENCEPIECE_FILES[0]})")
    state = {name: tensor.detach().numpy() for name, tensor in marian.state_dict().items()}
    if np.any(state["final_logits_bias"] != 0):
        raise ValueError(f"{directory}: final_logits_bias is not zero; vtx's model has none")
    model = build(config)
    perm = residual_permutation(config.d_model)
    for name, variable, layout in weight_map(model):
        array = from_marian(state[name], layout, perm)
        if tuple(array.shape) != tuple(variable.shape):
            raise ValueError(f"{directory}: {name} has shape {state[name].shape}, vtx's model "
                             f"of its configuration needs {tuple(variable.shape)}")
        variable.assign(array)
    return Checkpoint(model=[np.asarray(v.numpy()) for v in model.variables], optimizer=[],
                      meta={"step": 0, "model_config": config.to_dict()}, vocab=vocab_bytes)
