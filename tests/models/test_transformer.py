import dataclasses

import keras
import numpy as np
import pytest

from vtx import config
from vtx.config import BOS_ID, PAD_ID
from vtx.models import transformer

RNG = np.random.default_rng(0)


@pytest.fixture(scope="module")
def model():
    return transformer.build(config.preset("tiny", dropout=0.0))


def random_ids(shape, vocab_size=config.TINY.vocab_size):
    return RNG.integers(4, vocab_size, shape).astype("int32")


def test_exactly_one_embedding_matrix_is_shared_with_the_output_projection(model):
    vocab_shaped = [w for w in model.weights if tuple(w.shape) == (model.config.vocab_size,
                                                                   model.config.d_model)]
    assert len(vocab_shaped) == 1
    assert not any(w.shape[-1] == model.config.vocab_size for w in model.weights)
    src, tgt = random_ids((1, 4)), random_ids((1, 3))
    hidden_probe = model((src, tgt))
    matrix = vocab_shaped[0]
    matrix.assign(matrix * 2.0)  # the output projection must see the change
    assert not np.allclose(model((src, tgt)), hidden_probe)


def test_changing_a_future_target_token_changes_no_earlier_logit(model):
    src, tgt = random_ids((2, 6)), random_ids((2, 8))
    base = np.asarray(model((src, tgt)))
    for t in (1, 4, 7):
        changed = tgt.copy()
        changed[:, t] = (changed[:, t] + 1 - 4) % (model.config.vocab_size - 4) + 4
        out = np.asarray(model((src, changed)))
        np.testing.assert_array_equal(out[:, :t], base[:, :t])
        assert not np.allclose(out[:, t], base[:, t])


def test_extra_source_padding_changes_no_logit(model):
    src, tgt = random_ids((2, 5)), random_ids((2, 6))
    src[1, 3:] = PAD_ID
    padded = np.concatenate([src, np.zeros((2, 9), "int32")], axis=1)
    np.testing.assert_allclose(model((padded, tgt)), model((src, tgt)), atol=1e-5)


@pytest.mark.parametrize("grow", [False, True], ids=["allocated_cache", "growing_cache"])
def test_cached_decode_step_equals_full_forward_over_24_steps(model, grow):
    src = random_ids((3, 9))
    src[0, 4:] = PAD_ID
    tgt = random_ids((3, 24))
    tgt[:, 0] = BOS_ID
    full = np.asarray(model((src, tgt)))
    state = model.init_state(src, max_length=None if grow else 30)
    for t in range(24):
        logits, state = model.decode_step(tgt[:, t], state, grow=grow)
        assert np.abs(np.asarray(logits) - full[:, t]).max() < 1e-4
    assert int(state["index"]) == 24
    assert state["self_keys"][0].shape[2] == (24 if grow else 30)  # [B, H, positions, K]


@pytest.mark.parametrize("grow", [False, True], ids=["allocated_cache", "growing_cache"])
def test_a_grouped_cache_gives_each_hypothesis_the_logits_of_its_own_prefix(model, grow):
    """A beam search's cache held once per sentence (`init_state(group=G)`, vtx translate's):
    hypotheses that take each other's places at every step (random parents, as a search
    reorders them) each get the full forward's logits of their own token prefix, though only
    their ancestors' slots are reordered, never the cache."""
    group, rows = 3, 6  # 2 sentences
    src = random_ids((2, 7))
    src[1, 5:] = PAD_ID
    state = model.init_state(src, max_length=None if grow else 12, group=group)
    state["ancestors"] = np.repeat(np.asarray(state["ancestors"]), group, axis=0)  # a row each
    sources, prefixes = np.repeat(src, group, axis=0), np.full((rows, 1), BOS_ID, "int32")
    for t in range(10):
        logits, state = model.decode_step(prefixes[:, -1], state, grow=grow)
        full = np.asarray(model((sources, prefixes)))[:, t]
        assert np.abs(np.asarray(logits) - full).max() < 1e-4, t
        parents = np.arange(rows) // group * group + RNG.integers(0, group, rows)
        state["ancestors"] = np.asarray(state["ancestors"])[parents]
        prefixes = np.concatenate([prefixes[parents], random_ids((rows, 1))], axis=1)
    assert state["self_keys"][0].shape == (2, model.config.num_heads, (10 if grow else 12) * group,
                                           model.config.head_dim)


def test_compiled_decode_step_matches_eager(model):
    import tensorflow as tf

    src, tgt = random_ids((2, 5)), random_ids((2, 3))
    eager_state = model.init_state(src, 8)
    compiled = tf.function(model.decode_step, jit_compile=True)
    compiled_state = model.init_state(src, 8)
    for t in range(3):
        eager, eager_state = model.decode_step(tgt[:, t], eager_state)
        fast, compiled_state = compiled(tgt[:, t], compiled_state)
        np.testing.assert_allclose(fast, eager, atol=1e-5)


def test_save_and_load_give_identical_logits(model, tmp_path):
    src, tgt = random_ids((2, 5)), random_ids((2, 4))
    model.save(tmp_path / "model.keras")
    loaded = keras.saving.load_model(tmp_path / "model.keras")
    assert isinstance(loaded, transformer.Transformer)
    assert loaded.config == model.config
    np.testing.assert_array_equal(loaded((src, tgt)), model((src, tgt)))


def test_dropout_is_active_only_in_training():
    model = transformer.build(config.preset("tiny", dropout=0.5))
    src, tgt = random_ids((2, 5)), random_ids((2, 4))
    np.testing.assert_array_equal(model((src, tgt)), model((src, tgt)))
    assert not np.allclose(model((src, tgt), training=True), model((src, tgt)))


def test_mixed_bfloat16_model_returns_float32_logits_close_to_float32():
    cfg = config.preset("tiny", dropout=0.0)
    full, mixed = transformer.build(cfg), transformer.build(cfg, dtype="mixed_bfloat16")
    mixed.set_weights(full.get_weights())
    src, tgt = random_ids((2, 5)), random_ids((2, 4))
    logits = mixed((src, tgt))
    assert logits.dtype == "float32"
    np.testing.assert_allclose(logits, full((src, tgt)), atol=0.3)


@pytest.mark.parametrize("arch,paper", [("base", 65e6), ("big", 213e6)])
def test_parameter_count_within_5_percent_of_the_paper(arch, paper):
    model = transformer.build(config.preset(arch, vocab_size=37000))
    count = model.count_params()
    assert abs(count - paper) / paper < 0.05
    if arch == "base":
        assert count == 63_082_496  # tied, no output bias, post-norm: no final LayerNorm


def test_pairs_packed_in_rows_get_the_logits_each_gets_alone(model):
    """Packed rows (several pairs a row, `vtx.data.packing`): every pair attends only to itself,
    its positions restart at 0, so its logits are those of the pair in a row of its own."""
    from vtx.data.packing import PACKED_KEYS, pack_batch

    lengths = [[(5, 3), (2, 6), (4, 1)], [(7, 8)], []]  # the last row: padding only
    rows = [[(random_ids((s,)), random_ids((t,))) for s, t in row] for row in lengths]
    batch = pack_batch(rows, (3, 16, 19))
    packing = {key: batch[key] for key in PACKED_KEYS}
    states = model.decoder_states((batch["source"], batch["target_in"]), packing=packing)
    logits = np.asarray(model.embedding.project(states))
    for row, pairs in enumerate(rows):
        start = 0
        for source, target in pairs:
            target_in = np.concatenate([[BOS_ID], target]).astype("int32")
            alone = np.asarray(model((source[None], target_in[None])))[0]
            packed = logits[row, start:start + len(target_in)]
            np.testing.assert_allclose(packed, alone, atol=1e-5)
            start += len(target_in)
    assert np.isfinite(logits).all()


MARIAN_SHAPED = config.preset("tiny", dropout=0.0, activation="swish", scale_embedding=False,
                              position_layout="sines_then_cosines", final_logits_bias=True,
                              layer_norm_epsilon=1e-5)


@pytest.mark.parametrize("activation", ["swish", "gelu"])
def test_the_added_options_decode_cached_as_the_full_forward_pass(activation):
    model = transformer.build(dataclasses.replace(MARIAN_SHAPED, activation=activation))
    assert model.count_params() == model.config.parameter_count
    model.embedding.bias.assign(RNG.normal(size=model.config.vocab_size).astype("float32"))
    src, tgt = random_ids((2, 7)), random_ids((2, 9))
    src[1, 5:] = PAD_ID
    tgt[:, 0] = BOS_ID
    full = np.asarray(model((src, tgt)))
    state = model.init_state(src, max_length=12)
    for t in range(9):
        logits, state = model.decode_step(tgt[:, t], state)
        np.testing.assert_allclose(logits, full[:, t], atol=1e-5)
    plain = transformer.build(config.preset("tiny", dropout=0.0))
    assert len(plain.variables) + 1 == len(model.variables)


def test_each_added_option_changes_the_logits():
    base = transformer.build(config.preset("tiny", dropout=0.0))
    src, tgt = random_ids((2, 5)), random_ids((2, 4))
    reference = np.asarray(base((src, tgt)))
    for change in ({"activation": "swish"}, {"activation": "gelu"}, {"scale_embedding": False},
                   {"position_layout": "sines_then_cosines"}):
        other = transformer.build(dataclasses.replace(base.config, **change))
        other.set_weights(base.get_weights())
        assert not np.allclose(other((src, tgt)), reference, atol=1e-4), change
