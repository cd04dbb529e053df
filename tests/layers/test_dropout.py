import json
import os
import socket
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from tests.conftest import REPO_ROOT
from vtx.layers.dropout import Dropout, dropout_mask

SHAPE = (16, 125, 512)  # 1,024,000 elements


def ones(dtype=tf.float32):
    return tf.ones(SHAPE, dtype)


@pytest.mark.parametrize("rate", [0.1, 0.3])
def test_drops_the_rate_and_scales_the_rest_by_the_exact_inverse_keep_probability(rate):
    threshold = round(rate * 65536)
    out = np.asarray(Dropout(rate, seed=1)(ones(), training=True))
    kept = out != 0
    # 1,024,000 draws: the kept share's standard deviation is ~4.5e-4 at 0.3; 0.003 is > 6 of it.
    assert abs(kept.mean() - (1 - rate)) < 0.003
    np.testing.assert_array_equal(out[kept], np.float32(65536 / (65536 - threshold)))
    assert abs(out.mean() - 1.0) < 0.005  # the expected output is the input


def test_inference_and_a_zero_rate_pass_the_inputs_through():
    x = tf.random.stateless_normal(SHAPE, seed=(1, 2))
    np.testing.assert_array_equal(Dropout(0.3, seed=1)(x, training=False), x)
    np.testing.assert_array_equal(Dropout(0.0, seed=1)(x, training=True), x)


def test_every_call_draws_a_new_mask_and_each_draws_two_halves_independently():
    layer = Dropout(0.5, seed=1)
    first = np.asarray(layer(ones(), training=True)) != 0
    second = np.asarray(layer(ones(), training=True)) != 0
    assert 0.45 < (first == second).mean() < 0.55  # unrelated masks agree half the time
    # The two 16-bit halves of one 32-bit draw mask neighbouring elements: they must not agree
    # more than independent draws would.
    flat = first.reshape(-1)
    assert 0.45 < (flat[0::2] == flat[1::2]).mean() < 0.55


def test_the_mask_covers_odd_sizes_and_its_seed_decides_it():
    seed = tf.constant([3, 4], tf.int32)
    mask = dropout_mask(tf.constant([7, 3]), 6554, seed)
    assert mask.shape == (7, 3) and mask.dtype == tf.bool
    np.testing.assert_array_equal(mask, dropout_mask(tf.constant([7, 3]), 6554, seed))
    assert not np.array_equal(dropout_mask(tf.constant([700]), 32768, seed),
                              dropout_mask(tf.constant([700]), 32768, seed + 1))


def test_the_gradient_is_the_mask_times_the_scale():
    x = tf.random.stateless_normal((8, 9, 32), seed=(5, 6))
    layer = Dropout(0.3, seed=2)
    with tf.GradientTape() as tape:
        tape.watch(x)
        out = layer(x, training=True)
    gradient = np.asarray(tape.gradient(out, x))
    kept = np.asarray(out) != 0
    scale = np.float32(65536 / (65536 - round(0.3 * 65536)))
    np.testing.assert_array_equal(gradient, np.where(kept, scale, 0).astype(np.float32))


def test_bfloat16_inputs_keep_their_dtype_and_compiled_is_the_same_as_eager():
    layer = Dropout(0.1, seed=3, dtype="mixed_bfloat16")
    out = layer(ones(tf.bfloat16), training=True)
    assert out.dtype == tf.bfloat16
    kept = np.asarray(tf.cast(out, tf.float32)) != 0
    assert abs(kept.mean() - 0.9) < 0.003

    seed = tf.constant([7, 8], tf.int32)
    eager = dropout_mask(tf.constant(SHAPE), 6554, seed)
    compiled = tf.function(lambda: dropout_mask(tf.constant(SHAPE), 6554, seed),
                           jit_compile=True)()
    np.testing.assert_array_equal(eager, compiled)


def test_a_noise_shape_falls_back_to_keras():
    layer = Dropout(0.5, noise_shape=(16, 1, 512), seed=4)
    out = np.asarray(layer(ones(), training=True))
    assert (out == out[:, :1, :]).all()  # one mask for every position of a row


def test_it_serializes_as_keras_dropout_does():
    layer = Dropout(0.2, seed=9, name="drop")
    rebuilt = keras.layers.deserialize(keras.layers.serialize(layer))
    assert isinstance(rebuilt, Dropout) and rebuilt.rate == 0.2 and rebuilt.name == "drop"


def replica_masks(out, *args, env=None, wait=True):
    command = [sys.executable, "-m", "tests.layers.replica_masks", str(out), *map(str, args)]
    process = subprocess.Popen(command, cwd=REPO_ROOT, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, env=env)
    return finished(process, out) if wait else (process, out)


def finished(process, out):
    output, _ = process.communicate(timeout=300)
    assert process.returncode == 0, output
    with np.load(out) as data:
        return data["masks"], data["ids"]


def assert_unrelated(a, b):
    # 4,096 elements kept with probability 1/2: two unrelated masks agree on ~2,048 (standard
    # deviation 32); a shared seed would make them equal.
    assert 1700 < (a == b).sum() < 2400


def test_each_replica_draws_its_own_mask_and_a_run_draws_the_same_again(tmp_path):
    """Under MirroredStrategy the seed generator's state is one mirrored variable: without the
    replica's id in the seed every replica would drop the same units."""
    masks, ids = replica_masks(tmp_path / "a.npz", "--devices", 2)
    assert ids.tolist() == [0, 1]
    for step in masks:
        assert_unrelated(step[0], step[1])
    assert_unrelated(masks[0][0], masks[1][0])  # each step its own mask too
    again, _ = replica_masks(tmp_path / "b.npz", "--devices", 2)
    np.testing.assert_array_equal(masks, again)


def test_outside_a_strategy_the_mask_is_the_seed_generators_own():
    layer = Dropout(0.5, seed=1)
    out = layer(tf.ones([64, 64]), training=True)
    seed = keras.random.SeedGenerator(seed=1).next()
    seed = tf.cast(tf.math.floormod(seed, tf.int32.max - 1), tf.int32)
    np.testing.assert_array_equal(out != 0, dropout_mask([64, 64], 32768, seed))


@pytest.mark.slow
def test_each_worker_of_a_tf_config_cluster_draws_its_own_mask(tmp_path):
    """Every worker sets the same global seed: the worker's index must reach the seed too
    (`replica_id_in_sync_group` counts the replicas of every worker)."""
    ports = []
    for _ in range(2):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            ports.append(s.getsockname()[1])
    cluster = {"worker": [f"127.0.0.1:{port}" for port in ports]}
    processes = []
    for index in range(2):
        env = dict(os.environ, TF_CONFIG=json.dumps({"cluster": cluster,
                                                     "task": {"type": "worker", "index": index}}))
        processes.append(replica_masks(tmp_path / f"w{index}.npz", env=env, wait=False))
    (masks0, ids0), (masks1, ids1) = [finished(*process) for process in processes]
    assert ids0.tolist() == [0] and ids1.tolist() == [1]
    for step0, step1 in zip(masks0, masks1):
        assert_unrelated(step0[0], step1[0])
