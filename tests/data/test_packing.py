"""Packed training batches: one shape, every pair once, pairs told apart, resumable, sharded."""

import collections
import re

import numpy as np
import pytest

from tests.data.test_pipeline import stored_pairs
from vtx.config import BOS_ID, EOS_ID, PAD_ID
from vtx.data import packing, pipeline
from vtx.data.directory import DataDirectory

MAX_TOKENS = 600


@pytest.fixture(scope="module")
def shape(small_data_dir):
    shapes = packing.packed_shapes(small_data_dir, MAX_TOKENS)
    assert len(shapes) == 1
    return shapes[0]


@pytest.fixture(scope="module")
def epoch0(small_data_dir, shape):
    return list(packing.packed_batches(small_data_dir, [shape], seed=7, epoch=0))


def unpacked_pairs(batches):
    """(source, target) id tuples of every pair of the batches, in order, read through the
    segment ids and positions (which must be consistent with the ids)."""
    pairs = []
    for batch in batches:
        for row in range(len(batch["source"])):
            source_segments = batch["source_segments"][row]
            target_segments = batch["target_segments"][row]
            assert (batch["source"][row][source_segments == 0] == PAD_ID).all()
            assert (batch["target_in"][row][target_segments == 0] == PAD_ID).all()
            for segment in range(1, int(target_segments.max(initial=0)) + 1):
                source_at = source_segments == segment
                target_at = target_segments == segment
                for at, positions in ((source_at, batch["source_positions"][row]),
                                      (target_at, batch["target_positions"][row])):
                    # contiguous, its positions 0, 1, ...
                    np.testing.assert_array_equal(positions[at], np.arange(at.sum()))
                    where = np.flatnonzero(at)
                    assert not where.size or where[-1] - where[0] == where.size - 1
                target_in = batch["target_in"][row][target_at]
                target_out = batch["target_out"][row][target_at]
                assert target_in[0] == BOS_ID and target_out[-1] == EOS_ID
                np.testing.assert_array_equal(target_in[1:], target_out[:-1])
                pairs.append((tuple(batch["source"][row][source_at]), tuple(target_out[:-1])))
    return pairs


def test_every_batch_has_the_one_shape_within_the_token_bound(small_data_dir, shape, epoch0):
    rows, source, target = shape
    assert (rows % 8 == 0 or rows < 8) and rows * max(source, target) <= MAX_TOKENS
    source_lengths, target_lengths = pipeline._side_lengths(small_data_dir, ("train",))
    assert target >= target_lengths.max() and source >= source_lengths.max()
    for batch in epoch0:
        assert {key: value.shape for key, value in batch.items()} == {
            key: (rows, source if key.startswith("source") else target) for key in batch}
        assert all(value.dtype == np.int32 for value in batch.values())


def test_one_epoch_yields_every_pair_exactly_once(small_data_dir, epoch0):
    assert (collections.Counter(unpacked_pairs(epoch0))
            == collections.Counter(stored_pairs(small_data_dir, "train")))


def test_packed_rows_hold_more_real_positions_than_buckets(small_data_dir, shape, epoch0):
    real = sum(int((b["source"] != PAD_ID).sum() + (b["target_in"] != PAD_ID).sum())
               for b in epoch0)
    positions = sum(b["source"].size + b["target_in"].size for b in epoch0)
    fill = packing.packed_fill(small_data_dir, [shape], seed=7)
    assert fill == pytest.approx(real / positions)
    assert np.mean([(b["source_segments"].max(axis=1)).mean() for b in epoch0]) > 2
    boundaries = pipeline.bucket_boundaries_for(small_data_dir, max_tokens=MAX_TOKENS)
    bucketed = pipeline.position_fill(small_data_dir, "train", MAX_TOKENS, boundaries)
    assert fill > bucketed


def test_order_is_a_function_of_seed_and_epoch(small_data_dir, shape, epoch0):
    again = list(packing.packed_batches(small_data_dir, [shape], seed=7, epoch=0))
    assert len(again) == len(epoch0)
    for first, second in zip(epoch0, again):
        for key in first:
            np.testing.assert_array_equal(first[key], second[key])
    for seed, epoch in ((7, 1), (8, 0)):
        other = unpacked_pairs(packing.packed_batches(small_data_dir, [shape], seed=seed,
                                                      epoch=epoch))
        assert other != unpacked_pairs(epoch0)
        assert collections.Counter(other) == collections.Counter(unpacked_pairs(epoch0))


def test_skip_batches_and_worker_shards(small_data_dir, shape, epoch0):
    skip = len(epoch0) // 3
    resumed = list(packing.packed_batches(small_data_dir, [shape], seed=7, skip_batches=skip))
    assert unpacked_pairs(resumed) == unpacked_pairs(epoch0[skip:])
    for index in range(3):
        part = list(packing.packed_batches(small_data_dir, [shape], seed=7, num_shards=3,
                                           shard_index=index, skip_batches=1))
        assert unpacked_pairs(part) == unpacked_pairs(epoch0[index::3][1:])


def test_pack_batch_lays_out_ids_segments_and_positions():
    rows = [[([5, 6], [7]), ([8], [9, 10])], [([11, 12, 13], [14, 15])], []]
    batch = packing.pack_batch(rows, (3, 4, 6))
    B, E = BOS_ID, EOS_ID
    expected = {
        "source": [[5, 6, 8, PAD_ID], [11, 12, 13, PAD_ID], [PAD_ID] * 4],
        "target_in": [[B, 7, B, 9, 10, PAD_ID], [B, 14, 15, PAD_ID, PAD_ID, PAD_ID],
                      [PAD_ID] * 6],
        "target_out": [[7, E, 9, 10, E, PAD_ID], [14, 15, E, PAD_ID, PAD_ID, PAD_ID],
                       [PAD_ID] * 6],
        "source_segments": [[1, 1, 2, 0], [1, 1, 1, 0], [0] * 4],
        "target_segments": [[1, 1, 2, 2, 2, 0], [1, 1, 1, 0, 0, 0], [0] * 6],
        "source_positions": [[0, 1, 0, 0], [0, 1, 2, 0], [0] * 4],
        "target_positions": [[0, 1, 0, 1, 2, 0], [0, 1, 2, 0, 0, 0], [0] * 6]}
    assert list(batch) == list(expected)
    for key, value in expected.items():
        assert batch[key].dtype == np.int32
        np.testing.assert_array_equal(batch[key], value, err_msg=key)
    with pytest.raises(ValueError, match="pair 1 of the batch does not fit its packed row of 4 "
                                         "target positions"):
        packing.pack_batch(rows[:1], (1, 4, 4))


@pytest.mark.parametrize("gap", [-1, packing.READ_GAP])  # -1: one read a pair
def test_batches_built_from_pair_indices_equal_pack_batch_of_their_ids(small_data_dir, shape,
                                                                       gap, monkeypatch):
    monkeypatch.setattr(packing, "READ_GAP", gap)
    # `packed_batches` reads each batch's ids with a few reads a side, across the split's shards
    # (300 pairs each here); `pack_batch` is given the ids pair by pair, read from the files
    # apart (`stored_pairs`).
    source, target = pipeline._side_lengths(small_data_dir, ("train",))
    cap = int(np.percentile(np.maximum(source, target), 90))
    shapes = packing.packed_shapes(small_data_dir, MAX_TOKENS, cap=cap)
    split = packing._Split(small_data_dir, "train")
    stored = stored_pairs(small_data_dir, "train")
    batches = list(packing._epoch_batches(split, shapes, seed=7, epoch=1))
    assert {index for index, _ in batches} == {0, 1}
    assert any(not row for _, rows in batches for row in rows)  # last batches: empty rows
    for index, rows in batches:
        expected = packing.pack_batch([[stored[pair] for pair in row] for row in rows],
                                      shapes[index])
        built = split.batch(rows, shapes[index])
        assert list(built) == list(expected)
        for key, value in expected.items():
            assert built[key].dtype == value.dtype
            np.testing.assert_array_equal(built[key], value, err_msg=key)
    short = int(split.lengths[0, 0] + split.lengths[0, 1]) - 1  # pairs 0 and 1 need one more
    with pytest.raises(ValueError, match=f"pair 1 of the batch does not fit its packed row of "
                                         f"{short} source positions"):
        split.batch([[0, 1]], (1, short, shape[2]))


def test_pack_rows_fills_first_fit_and_closes_the_fullest():
    source = np.array([3, 3, 2, 4, 1])
    target = np.array([2, 5, 2, 1, 1])
    # capacities 6 x 6, two open rows: 0 -> row A; 1 fits A (6, 7 > 6: no) -> row B;
    # 2 fits A (5, 4); 3 fits neither (A has 1, 2; B has 3, 1: 4 > 3) -> close the fullest (A)
    rows = packing.pack_rows(source, target, np.arange(5), 6, 6, window=2)
    assert rows == [[0, 2], [1, 4], [3]]
    with pytest.raises(ValueError, match="pair 1 has 3 source and 5 target ids, more than a "
                                         "packed row's 4 and 4"):
        packing.pack_rows(source, target, np.arange(5), 4, 4)


def test_too_few_tokens_for_the_longest_pair_are_named(small_data_dir):
    with pytest.raises(ValueError, match=r"--max-tokens 20 cannot hold a packed row of \d+ ids"):
        packing.packed_shapes(small_data_dir, 20)
    with pytest.raises(ValueError, match="shard_index 3"):
        next(packing.packed_batches(small_data_dir, [(8, 64, 64)], num_shards=3, shard_index=3))
    with pytest.raises(ValueError, match=r"more than the packed rows \[\(8, 8, 8\)\] hold"):
        next(packing.packed_batches(small_data_dir, [(8, 8, 8)]))


def test_relative_cost_counts_positions_and_the_attention_of_long_rows():
    from vtx import config

    model = config.preset("base", num_layers=3, d_model=256, d_ff=1024, vocab_size=8000)
    buckets = [((64, 32, 32), 10)]
    # The same shape, half the batches: half the FLOPs.
    assert packing.relative_cost(model, buckets, [((64, 32, 32), 5)], 0,
                                 True) == pytest.approx(0.5)
    # As many positions in rows 32 times longer: attention over 1024 positions, not 32, costs
    # more than the matrix products saved nothing.
    long_rows = packing.relative_cost(model, buckets, [((2, 1024, 1024), 10)], 0, True)
    assert long_rows > 1.2
    # A second shape adds its batches.
    assert packing.relative_cost(model, buckets, [((64, 32, 32), 5), ((2, 1024, 1024), 10)], 0,
                                 True) == pytest.approx(0.5 + long_rows)
    # Without XLA only the real target tokens are projected, the same FLOPs in both: the more
    # of them, the nearer 1.
    few = packing.relative_cost(model, buckets, [((64, 32, 32), 5)], 1_000, False)
    assert 0.5 < few < packing.relative_cost(model, buckets, [((64, 32, 32), 5)], 20_000,
                                             False) < 1


def test_packed_batch_count_from_a_sample_is_close(small_data_dir, shape, epoch0, monkeypatch):
    assert packing.packed_batch_counts(small_data_dir, [shape], seed=7) == [len(epoch0)]
    monkeypatch.setattr(packing, "SAMPLE_PAIRS", 1000)  # of the split's 2000
    [estimate] = packing.packed_batch_counts(small_data_dir, [shape], seed=7)
    assert abs(estimate - len(epoch0)) <= 0.05 * len(epoch0)


def test_rows_capped_below_the_longest_pair_pack_the_longer_ones_in_a_second_shape(
        small_data_dir, shape):
    source, target = pipeline._side_lengths(small_data_dir, ("train",))
    cap = int(np.percentile(np.maximum(source, target), 90))
    shapes = packing.packed_shapes(small_data_dir, MAX_TOKENS, cap=cap)
    assert len(shapes) == 2 and shapes[1] == shape  # the second: rows for every pair
    assert shapes[0][2] < shape[2] and shapes[0][2] >= cap
    batches = list(packing.packed_batches(small_data_dir, shapes, seed=7))
    seen = collections.Counter((b["source"].shape, b["target_in"].shape) for b in batches)
    assert set(seen) == {((rows, s), (rows, t)) for rows, s, t in shapes}
    assert seen[((shapes[1][0], shapes[1][1]), (shapes[1][0], shapes[1][2]))] < len(batches) / 4
    assert (collections.Counter(unpacked_pairs(batches))
            == collections.Counter(stored_pairs(small_data_dir, "train")))
    counts = packing.packed_batch_counts(small_data_dir, shapes, seed=7)
    assert counts == [seen[((r, s), (r, t))] for r, s, t in shapes]
    # Short batches and long ones alternate in a seeded order, not one kind after the other.
    kinds = [b["target_in"].shape[1] == shapes[1][2] for b in batches]
    assert kinds.index(True) < len(kinds) - counts[1]
    skip = len(batches) // 2
    assert unpacked_pairs(packing.packed_batches(small_data_dir, shapes, seed=7,
                                                 skip_batches=skip)) == unpacked_pairs(
        batches[skip:])


def test_the_chosen_packing_is_the_cheapest_cap(small_data_dir):
    from vtx import config

    model = config.preset("base", num_layers=3, d_model=256, d_ff=1024, vocab_size=1000)
    boundaries = pipeline.bucket_boundaries_for(small_data_dir, max_tokens=MAX_TOKENS)
    buckets = pipeline.epoch_batch_counts(small_data_dir, "train", MAX_TOKENS, boundaries)
    shapes, cost = packing.choose_shapes(small_data_dir, MAX_TOKENS, 8, model, buckets, True)
    _, target = pipeline._side_lengths(small_data_dir, ("train",))
    caps = packing.caps_to_try(small_data_dir, 8)
    assert caps[0] is None and len(caps) > 2
    for cap in caps:
        tried = packing.packed_shapes(small_data_dir, MAX_TOKENS, 8, cap)
        tried_cost = packing.relative_cost(model, buckets, list(zip(
            tried, packing.packed_batch_counts(small_data_dir, tried))), int(target.sum()), True)
        assert cost <= tried_cost + packing.SECOND_SHAPE_SAVING * (len(tried) - len(shapes))


def test_a_shard_cut_between_its_check_and_the_reads_is_named(small_data_dir, tmp_path):
    """Each batch checks the sizes of the shards it reads, then reads them: a cut made in
    between (where a memory map's read killed the process by SIGBUS) ends in a short read,
    named. The reads alone here, after the cut."""
    import shutil

    from vtx.errors import DataError

    data = tmp_path / "data"
    shutil.copytree(small_data_dir, data)
    split = packing._Split(data, "train")
    name = DataDirectory.open(data).meta["splits"]["train"]["shards"][0]["name"]
    (data / f"{name}.bin").write_bytes(b"")
    pairs = np.flatnonzero(split.shard == 0)[-3:]
    with pytest.raises(DataError, match=rf"^{re.escape(str(data / name))}\.bin holds 0 bytes "
                                        rf"where {re.escape(str(data / name))}\.idx counts "
                                        rf"[\d,]+: cut short or rewritten since training "
                                        rf"opened it"):
        split._gather(pairs, 1, split.lengths[1, pairs])


@pytest.mark.parametrize("keep", [0.0, 0.5])
def test_a_shard_cut_short_while_training_reads_it_is_named_not_a_bus_error(small_data_dir,
                                                                              tmp_path, keep):
    """A shard cut short in place mid-epoch (a copy over it, a full disk; to nothing or to half,
    so that some batches still read whole) is named as the batch reading past its end fails.
    Packed batches read the shards through memory maps before: the next batch's read of a page
    past the new end killed the process by SIGBUS (exit -7, nothing said), and the size
    check added before each batch left its reads exposed to a cut made in between. Run in a
    child process, which such a fault would kill."""
    import shutil
    import subprocess
    import sys
    import textwrap

    data = tmp_path / "data"
    shutil.copytree(small_data_dir, data)
    child = textwrap.dedent("""
        import os, sys
        from vtx.data import packing
        from vtx.data.directory import DataDirectory, checked_reading
        from vtx.errors import DataError

        data = sys.argv[1]
        shapes = packing.packed_shapes(data, 600)
        batches = checked_reading(packing.packed_batches(data, shapes), data)
        next(batches)  # the epoch's shards opened
        for shard in DataDirectory.open(data).meta["splits"]["train"]["shards"]:
            path = os.path.join(data, shard["name"] + ".bin")
            os.truncate(path, int(os.path.getsize(path) * float(sys.argv[2])) // 2 * 2)
        try:
            for _ in batches:
                pass
        except DataError as error:
            print(error, error.__cause__, sep="\\n")
            sys.exit(3)
    """)
    result = subprocess.run([sys.executable, "-c", child, str(data), str(keep)],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 3, (result.returncode, result.stderr)
    named, cause = result.stdout.splitlines()
    assert re.match(rf"{re.escape(str(data))}/train\.\d+\.bin holds [\d,]+ bytes where "
                    rf"{re.escape(str(data))}/meta\.json counts ", named)
    assert re.search(r"^\S+train\.\d+\.bin holds [\d,]+ bytes where \S+train\.\d+\.idx "
                     r"counts [\d,]+: cut short or rewritten since training opened it", cause)


def test_fits_packed_holds_a_pair_that_a_row_of_some_shape_holds():
    shapes = [(8, 10, 12), (2, 30, 20)]
    source, target = np.array([10, 11, 30, 31, 5]), np.array([12, 12, 20, 1, 21])
    assert packing.fits_packed(source, target, shapes).tolist() == [True, True, True, False,
                                                                    False]
