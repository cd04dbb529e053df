"""The encoder-decoder Transformer of "Attention Is All You Need" (section 3, Figure 1).

Shapes: B batch, S source length, T target length, D model width, H heads, K head width,
L layers, M decoding cache length, V vocabulary.

Decoding interface (what beam search needs, and all it needs):
    state = model.init_state(source_ids, max_length)
    logits, state = model.decode_step(token_ids, state)   # [B] ids -> [B, V] float32 logits
Every tensor of `state` of rank >= 1 has B as its leading axis, so a search may reorder or
replicate hypotheses by gathering every such tensor along axis 0; the rank-0 `index` is shared.
"""

from __future__ import annotations

import keras
from keras import ops

from vtx.config import PAD_ID, ModelConfig, check_fits_in_memory
from vtx.layers import DecoderLayer, EncoderLayer, SharedEmbedding, SinusoidalPositionEncoding
from vtx.layers.decoder import causal_mask
from vtx.layers.dropout import Dropout


def same_segment(query_segments, key_segments):
    """int [B, T] and [B, S] segment ids (0: padding) -> bool [B, T, S]: True where the key is a
    real id of the query's segment."""
    keys = key_segments[:, None, :]
    return ops.logical_and(query_segments[:, :, None] == keys, keys != 0)


@keras.saving.register_keras_serializable(package="vtx")
class Transformer(keras.Model):
    """Post-norm encoder-decoder Transformer with one shared, scaled embedding matrix (the
    configuration's FFN activation, embedding scale, position layout and logits bias).

    Args:
        config: a `ModelConfig`.
        dtype: a Keras dtype policy name ("float32", "mixed_bfloat16", "mixed_float16").
    """

    def __init__(self, config: ModelConfig, **kwargs):
        super().__init__(**kwargs)
        self.config = config
        policy = self.dtype_policy
        self.embedding = SharedEmbedding(config.vocab_size, config.d_model,
                                         scale=config.scale_embedding,
                                         logits_bias=config.final_logits_bias, name="embedding",
                                         dtype=policy)
        self.position_encoding = SinusoidalPositionEncoding(layout=config.position_layout,
                                                            name="position_encoding", dtype=policy)
        self.embedding_dropout = Dropout(config.dropout, dtype=policy)
        layer_args = dict(d_model=config.d_model, d_ff=config.d_ff, num_heads=config.num_heads,
                          dropout=config.dropout, attention_dropout=config.attention_dropout,
                          relu_dropout=config.relu_dropout,
                          layer_norm_epsilon=config.layer_norm_epsilon,
                          activation=config.activation, dtype=policy)
        self.encoder_layers = [EncoderLayer(name=f"encoder_{i}", **layer_args)
                               for i in range(config.num_layers)]
        self.decoder_layers = [DecoderLayer(name=f"decoder_{i}", **layer_args)
                               for i in range(config.num_layers)]

    def build(self, input_shape=None):
        hidden_shape = (None, None, self.config.d_model)
        self.embedding.build()
        for layer in self.encoder_layers + self.decoder_layers:
            layer.build(hidden_shape)
        self.built = True

    def _embed(self, token_ids, start_index=0, training=False, positions=None):
        """[B, T] ids -> [B, T, D]: (sqrt(D)-scaled) embeddings + positions (`positions` [B, T]:
        each id's own), then dropout."""
        vectors = self.embedding(token_ids)
        encoding = self.position_encoding(vectors, start_index=start_index, positions=positions)
        vectors = vectors + (encoding if positions is not None else encoding[None])
        return self.embedding_dropout(vectors, training=training)

    def encode(self, source_ids, training=False, packing=None):
        """[B, S] source ids (PAD_ID-padded) -> (memory [B, S, D], memory_mask bool [B, 1, S]).
        `packing`: see `decoder_states`; the encoder's mask is then [B, S, S]."""
        if packing is None:
            memory_mask, positions = (source_ids != PAD_ID)[:, None, :], None
        else:
            segments = packing["source_segments"]
            memory_mask, positions = same_segment(segments, segments), packing["source_positions"]
        x = self._embed(source_ids, training=training, positions=positions)
        for layer in self.encoder_layers:
            x = layer(x, memory_mask, training=training)
        return x, memory_mask

    def decode(self, target_in, memory, memory_mask, training=False, packing=None):
        """Teacher-forced decoder: [B, T] inputs (bos + target) -> [B, T, D] decoder outputs,
        before the projection onto the vocabulary (`embedding.project`). With `packing` (see
        `decoder_states`) `memory_mask` is ignored: each position sees its own pair's source
        and the earlier positions of its own pair."""
        self_mask = positions = None
        if packing is not None:
            segments = packing["target_segments"]
            memory_mask = same_segment(segments, packing["source_segments"])  # [B, T, S]
            self_mask = ops.logical_and(same_segment(segments, segments),
                                        causal_mask(ops.shape(target_in)[1]))
            positions = packing["target_positions"]
        x = self._embed(target_in, training=training, positions=positions)
        for layer in self.decoder_layers:
            x = layer(x, memory, memory_mask, training=training, self_mask=self_mask)
        return x

    def decoder_states(self, inputs, training=False, packing=None):
        """inputs = (source_ids [B, S], target_in [B, T]) -> [B, T, D] decoder outputs: what
        `call` projects, for a caller that projects only some positions (training: the real
        ones).

        Args:
            packing: None, or for rows that hold several pairs each (`vtx.data.packing`) a dict
                of int [B, S] "source_segments" and "source_positions" and [B, T]
                "target_segments" and "target_positions": which pair of its row each id
                belongs to (1, 2, ...; 0 on padding) and its position in that pair. Each pair
                then gets what it would get alone in a row.
        """
        source_ids, target_in = inputs
        memory, memory_mask = self.encode(source_ids, training=training, packing=packing)
        return self.decode(target_in, memory, memory_mask, training=training, packing=packing)

    def call(self, inputs, training=False):
        """inputs = (source_ids [B, S], target_in [B, T]) -> logits [B, T, V] (float32)."""
        return self.embedding.project(self.decoder_states(inputs, training=training))

    # Entries of the decoding state computed once per sentence and read by all its hypotheses: a
    # beam search keeps them at B rows (`beam_search(beam_invariant=...)`), never copying them per
    # beam nor reordering them.
    BEAM_INVARIANT_STATE = ("memory_mask", "memory_keys", "memory_values")
    # Entries that gain one position per `decode_step(grow=True)` (axis 2; a grouped cache's
    # `ancestors`, axis 1).
    GROWING_STATE = ("self_keys", "self_values", "ancestors")
    # With `init_state(group=G)`, entries held once per sentence for its G hypotheses, never
    # reordered (beam-invariant to a search): the self-attention cache, each position's G slots
    # written by the G hypotheses of that step; each hypothesis reads its ancestors' slots.
    GROUPED_STATE = ("self_keys", "self_values")

    def init_state(self, source_ids, max_length: int | None, group: int = 1) -> dict:
        """Encode the source and allocate the decoding cache for up to `max_length` positions.

        Args:
            source_ids: int [B, S], PAD-padded.
            max_length: M, the positions the self-attention cache is allocated for (the fixed
                shapes XLA needs; `decode_step` writes one position a step); None: the cache
                starts empty and `decode_step(grow=True)` appends to it, so that each step reads
                and copies only the positions decoded so far.
            group: G > 1: the cache of a beam search of G hypotheses a sentence, held once
                per sentence and not reordered as hypotheses change (`GROUPED_STATE`): per
                layer `self_keys`/`self_values` [B, H, M * G, K] (growing as the plain cache
                does when `max_length` is None), position t's G slots (t * G to t * G + G - 1)
                written by the G hypotheses of step t, and `ancestors` int32 [B, M] (a search
                makes it [B * G, M], a row a hypothesis): the slot of each position that the
                hypothesis's own prefix wrote. A search then reorders `ancestors` (M integers a
                hypothesis) at each step instead of the cache (2 x L x H x M x K numbers a
                hypothesis, read and written: under XLA, where the cache holds all M positions
                from the start, its gather and a copy of it are a step's largest costs after
                the matrix products). Each hypothesis attends over its sentence's M * G
                slots, those of other prefixes masked: G times the scores of a plain cache
                (against K numbers a slot read either way).

        Returns:
            dict with `index` (int32 scalar, next position), `memory_mask` [B, 1, S], and per
            layer `memory_keys`/`memory_values` [B, H, S, K] and `self_keys`/`self_values`
            [B, H, M, K] (zeros, filled one position per `decode_step`; [B, H, 0, K] when
            growing; see `group`).
        """
        memory, memory_mask = self.encode(source_ids)
        batch = ops.shape(source_ids)[0]
        positions = 0 if max_length is None else max_length
        # A grouped cache holds position t's G slots at t * G to t * G + G - 1.
        cache_shape = (batch, self.config.num_heads, positions * group, self.config.head_dim)
        state = {"index": ops.zeros((), "int32"), "memory_mask": memory_mask,
                 "memory_keys": [], "memory_values": [], "self_keys": [], "self_values": []}
        if group > 1:
            state["ancestors"] = ops.zeros((batch, positions), "int32")
        for layer in self.decoder_layers:
            keys, values = layer.project_memory(memory)
            state["memory_keys"].append(keys)
            state["memory_values"].append(values)
            state["self_keys"].append(ops.zeros(cache_shape, self.compute_dtype))
            state["self_values"].append(ops.zeros(cache_shape, self.compute_dtype))
        return state

    def step_weights(self) -> list:
        """What `decode_step` can be given so that it does not rebuild it at every step: each
        decoder layer's fused self-attention projection (`fused_query_key_value`). Build it once
        per search, outside its loop."""
        return [layer.self_attention.fused_query_key_value() for layer in self.decoder_layers]

    def decode_step(self, token_ids, state: dict, grow: bool = False, step_weights=None):
        """Feed one token per sentence at position state["index"].

        Args:
            token_ids: [B] int ids (BOS_ID at index 0).
            state: from `init_state` or the previous `decode_step`; its self-attention cache has
                B rows, its `BEAM_INVARIANT_STATE` B / G (G consecutive rows per sentence).
            grow: append this position to the self-attention cache (`init_state(max_length=
                None)`) instead of writing it into the allocated one.
            step_weights: `step_weights()`, built outside the decoding loop (None: built here).

        Returns:
            (logits [B, V] float32 for the next position, the new state).
        """
        index = state["index"]
        vectors = self.embedding(token_ids)  # [B, D]: one position per row (see layer.step)
        x = vectors + self.position_encoding(vectors[:, None, :], start_index=index)  # + [1, D]
        new_keys, new_values = [], []
        fused = self.step_weights() if step_weights is None else step_weights
        new_state = {**state, "index": index + 1}
        visible = None
        if "ancestors" in state:  # a grouped cache (`init_state(group=G)`)
            group = ops.shape(state["ancestors"])[0] // ops.shape(state["memory_mask"])[0]
            ancestors, visible = _grouped_visibility(state["ancestors"], index, group, grow)
            new_state["ancestors"] = ancestors
        for i, layer in enumerate(self.decoder_layers):
            x, keys, values = layer.step(x, index, state["self_keys"][i], state["self_values"][i],
                                         state["memory_keys"][i], state["memory_values"][i],
                                         state["memory_mask"], grow, fused[i], visible)
            new_keys.append(keys)
            new_values.append(values)
        logits = self.embedding.project(x)
        return logits, {**new_state, "self_keys": new_keys, "self_values": new_values}

    def get_config(self):
        return {**super().get_config(), "config": self.config.to_dict()}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        model_config = ModelConfig.from_dict(config.pop("config"))
        return cls(model_config, **config)


def _grouped_visibility(ancestors, index, group, grow: bool):
    """A grouped cache's step (`Transformer.init_state(group=G)`): (the hypotheses' ancestors
    with position `index` written (appended when `grow`), each hypothesis in its own slot there
    (row r: r mod G), what each hypothesis sees of its sentence's cache: bool [B, G, M * G],
    True at (position t, slot g) where t <= index and its own prefix wrote slot g at t)."""
    own = ops.cast(ops.arange(ops.shape(ancestors)[0]) % group, "int32")[:, None]  # [N, 1]
    if grow:
        ancestors = ops.concatenate([ancestors, own], axis=1)
    else:
        ancestors = ops.slice_update(ancestors, (0, index), own)
    positions = ops.shape(ancestors)[1]
    visible = ancestors[:, :, None] == ops.arange(group, dtype="int32")  # [N, M, G]
    if not grow:  # the allocated positions after this one: not written yet
        visible = ops.logical_and(visible, (ops.arange(positions) <= index)[None, :, None])
    return ancestors, ops.reshape(visible, (-1, group, positions * group))


def build(config: ModelConfig, dtype: str = "float32") -> Transformer:
    """Create a Transformer with its weights allocated.

    Args:
        config: the model configuration.
        dtype: Keras dtype policy: "float32", "mixed_bfloat16" or "mixed_float16".

    Raises:
        ValueError: its weights would not fit in this machine's memory (`check_fits_in_memory`).
    """
    check_fits_in_memory(config)
    model = Transformer(config, dtype=dtype, name="transformer")
    model.build()
    return model

