"""tf.data input pipeline: token bound, exactly-once epochs, deterministic order, resume, sharding."""

import collections
import itertools
import os
import shutil

import numpy as np
import pytest

from tests.data.conftest import SMALL_VOCAB, read_shard
from vtx import manifest
from vtx.config import BOS_ID, EOS_ID, PAD_ID
from vtx.data import pipeline
from vtx.data.directory import DataDirectory
from vtx.errors import DataError

MAX_TOKENS = 600


def batches_as_numpy(dataset):
    return [{key: value.numpy() for key, value in batch.items()} for batch in dataset]


def unpadded_pairs(batches):
    """(source, target) id tuples of every row but the all-pad fill, with padding, bos and eos
    stripped."""
    pairs = []
    for batch in batches:
        for source, target_out in zip(batch["source"], batch["target_out"]):
            target = target_out[target_out != PAD_ID]
            if not target.size:
                assert not source.any()  # a fill row: pad only
                continue
            assert target[-1] == EOS_ID
            pairs.append((tuple(source[source != PAD_ID]), tuple(target[:-1])))
    return pairs


def stored_pairs(data_dir, split):
    meta = DataDirectory.open(data_dir).meta
    pairs = []
    for shard in meta["splits"][split]["shards"]:
        sources, targets = read_shard(data_dir / shard["name"], meta["token_dtype"])
        pairs += [(tuple(s), tuple(t)) for s, t in zip(sources, targets)]
    return pairs


@pytest.fixture(scope="module")
def epoch0(small_data_dir):
    return batches_as_numpy(pipeline.train_batches(small_data_dir, max_tokens=MAX_TOKENS,
                                                   seed=7, epoch=0))


def test_data_dir_accessors(small_data_dir):
    data = DataDirectory.open(small_data_dir)
    assert data.vocab_size == SMALL_VOCAB
    assert data.vocabulary_path == small_data_dir / "spm.model"
    assert data.load_vocabulary().size == SMALL_VOCAB
    assert os.fspath(data) == str(data) == str(small_data_dir)
    assert data.split("train")["sentences"] > 0
    with pytest.raises(ValueError, match="split 'test' not in the data directory; it has train"):
        data.split("test")
    with pytest.raises(FileNotFoundError, match="not a `vtx preprocess` output directory"):
        DataDirectory.open(small_data_dir.parent)


def test_no_batch_exceeds_the_token_bound_counting_padding(epoch0):
    for batch in epoch0:
        assert batch["source"].size <= MAX_TOKENS
        assert batch["target_in"].size <= MAX_TOKENS
        assert batch["target_in"].shape == batch["target_out"].shape


def test_every_batch_has_one_of_at_most_8_shapes_whatever_its_fill(small_data_dir, epoch0):
    boundaries = pipeline.bucket_boundaries_for(small_data_dir)
    shapes = pipeline.batch_shapes(MAX_TOKENS, boundaries)
    assert len(shapes) <= pipeline.MAX_SHAPES
    assert {batch["source"].shape for batch in epoch0} <= {(r, s) for r, s, _ in shapes}
    assert all(batch["target_out"].shape == batch["source"].shape for batch in epoch0)
    assert all(rows % 8 == 0 or rows < 8 for rows, _, _ in shapes)
    filled = [b for b in epoch0 if not (b["target_out"] != PAD_ID).any(axis=1).all()]
    assert filled  # short batches exist and kept their bucket's shape
    for batch in filled:  # fill rows come last
        real = (batch["target_out"] != PAD_ID).any(axis=1)
        assert real[:real.sum()].all() and not batch["source"][real.sum():].any()


def test_target_in_is_bos_plus_target_and_target_out_is_target_plus_eos(epoch0):
    for batch in epoch0:
        rows = (batch["target_out"] != PAD_ID).any(axis=1)  # not the all-pad fill rows
        target_in, target_out = batch["target_in"][rows], batch["target_out"][rows]
        assert (target_in[:, 0] == BOS_ID).all()
        # Shifted by one: target_in[t + 1] == target_out[t] wherever target_out is a real token.
        real = (target_out[:, :-1] != PAD_ID) & (target_out[:, :-1] != EOS_ID)
        assert (target_in[:, 1:][real] == target_out[:, :-1][real]).all()
        assert ((target_in != PAD_ID).sum(1) == (target_out != PAD_ID).sum(1)).all()


def test_one_epoch_yields_every_kept_pair_exactly_once(small_data_dir, epoch0):
    assert (collections.Counter(unpadded_pairs(epoch0))
            == collections.Counter(stored_pairs(small_data_dir, "train")))


def test_the_shards_are_read_side_by_side(small_data_dir, epoch0):
    # A shard holds consecutive lines, and a corpus is often several joined end to end: read one
    # shard at a time, each stretch of updates trained on one source.
    shard_of = collections.defaultdict(set)  # (source, target) -> the shards holding it
    meta = DataDirectory.open(small_data_dir).meta
    for index, shard in enumerate(meta["splits"]["train"]["shards"]):
        sources, targets = read_shard(small_data_dir / shard["name"], meta["token_dtype"])
        for pair in zip(map(tuple, sources), map(tuple, targets)):
            shard_of[pair].add(index)
    assert len(meta["splits"]["train"]["shards"]) >= 5
    pairs = unpadded_pairs(epoch0)
    for start in range(0, len(pairs) - 100, 100):
        shards = set().union(*(shard_of[pair] for pair in pairs[start:start + 100]))
        assert len(shards) >= 5, (start, shards)


def test_same_seed_and_epoch_give_the_same_batches_in_the_same_order(small_data_dir, epoch0):
    again = batches_as_numpy(pipeline.train_batches(small_data_dir, max_tokens=MAX_TOKENS,
                                                    seed=7, epoch=0))
    assert len(again) == len(epoch0)
    for first, second in zip(epoch0, again):
        np.testing.assert_array_equal(first["source"], second["source"])
        np.testing.assert_array_equal(first["target_out"], second["target_out"])


def test_other_epoch_or_seed_gives_another_order(small_data_dir, epoch0):
    for seed, epoch in ((7, 1), (8, 0)):
        other = unpadded_pairs(batches_as_numpy(pipeline.train_batches(
            small_data_dir, max_tokens=MAX_TOKENS, seed=seed, epoch=epoch)))
        assert other != unpadded_pairs(epoch0)
        assert collections.Counter(other) == collections.Counter(unpadded_pairs(epoch0))


def test_skip_batches_resumes_at_the_tail_of_the_uninterrupted_epoch(small_data_dir, epoch0):
    skip = len(epoch0) // 3
    resumed = batches_as_numpy(pipeline.train_batches(small_data_dir, max_tokens=MAX_TOKENS,
                                                      seed=7, epoch=0, skip_batches=skip))
    assert unpadded_pairs(resumed) == unpadded_pairs(epoch0[skip:])


def test_worker_shards_split_the_batches_of_an_epoch(small_data_dir, epoch0):
    parts = [batches_as_numpy(pipeline.train_batches(small_data_dir, max_tokens=MAX_TOKENS,
                                                     seed=7, epoch=0, num_shards=3,
                                                     shard_index=i)) for i in range(3)]
    for i, part in enumerate(parts):
        assert unpadded_pairs(part) == unpadded_pairs(epoch0[i::3])


def test_eval_batches_cover_the_split_in_a_fixed_order_with_indices(small_data_dir):
    first = batches_as_numpy(pipeline.eval_batches(small_data_dir, "valid", MAX_TOKENS))
    second = batches_as_numpy(pipeline.eval_batches(small_data_dir, "valid", MAX_TOKENS))
    assert [b["index"].tolist() for b in first] == [b["index"].tolist() for b in second]
    stored = stored_pairs(small_data_dir, "valid")
    indices = np.concatenate([batch["index"] for batch in first])
    indices = indices[indices >= 0]  # -1: fill rows
    assert sorted(indices.tolist()) == list(range(len(stored)))
    for index, pair in zip(indices, unpadded_pairs(first)):
        assert pair == stored[index]


def test_custom_bucket_boundaries_are_used(small_data_dir):
    boundaries = [16, 32, 64, 128]
    batches = batches_as_numpy(pipeline.train_batches(small_data_dir, max_tokens=MAX_TOKENS,
                                                      bucket_boundaries=boundaries))
    assert {batch["source"].shape[1] for batch in batches} <= set(boundaries)
    with pytest.raises(ValueError, match="bucket boundaries end at 16, below the longest pair"):
        pipeline.train_batches(small_data_dir, max_tokens=MAX_TOKENS, bucket_boundaries=[8, 16])


def test_each_side_is_padded_to_the_longest_of_that_side_in_its_bucket(small_data_dir):
    boundaries = [16, 32, 64, 128]
    sides = pipeline.side_lengths_for(small_data_dir, ("train",), boundaries)
    assert any(side < length for length, pair in zip(boundaries, sides) for side in pair)
    full, cut = (batches_as_numpy(pipeline.train_batches(
        small_data_dir, max_tokens=MAX_TOKENS, seed=7, bucket_boundaries=boundaries,
        side_lengths=lengths)) for lengths in (None, sides))
    assert unpadded_pairs(cut) == unpadded_pairs(full)  # the same batches: only padding cut
    shapes = pipeline.batch_shapes(MAX_TOKENS, boundaries, sides)
    seen = {(b["source"].shape, b["target_in"].shape, b["target_out"].shape) for b in cut}
    assert seen <= {((r, s), (r, t), (r, t)) for r, s, t in shapes}
    longest = {}  # each bucket's longest real source and target_in, by its rows
    for batch in cut:
        rows = batch["source"].shape[0]
        found = [(batch[key] != PAD_ID).sum(1).max() for key in ("source", "target_in")]
        longest[rows] = np.maximum(longest.get(rows, (0, 0)), found)
    for rows, source, target in shapes:
        if rows in longest:
            assert tuple(longest[rows]) == (source, target)
    stepped = pipeline.side_lengths_for(small_data_dir, ("train",), boundaries, step=8)
    for length, pair, exact in zip(boundaries, stepped, sides):
        for side, least in zip(pair, exact):
            assert side == length or (side % 8 == 0 and least <= side < least + 8)
    # lengths computed from other data are refused, not a pair cut
    with pytest.raises(Exception, match="a pair has a (source|target) longer than the"):
        batches_as_numpy(pipeline.train_batches(
            small_data_dir, max_tokens=MAX_TOKENS, bucket_boundaries=boundaries,
            side_lengths=[(2, 2)] * len(boundaries)))


@pytest.mark.parametrize("max_shapes", [1, 3, 16])
def test_position_fill_is_the_share_of_real_tokens_in_an_epochs_batches(small_data_dir,
                                                                        max_shapes):
    boundaries = pipeline.bucket_boundaries_for(
        small_data_dir, **pipeline.shape_policy(False, max_shapes), max_tokens=MAX_TOKENS)
    assert len(boundaries) <= max_shapes
    sides = pipeline.side_lengths_for(small_data_dir, ("train",), boundaries)
    batches = batches_as_numpy(pipeline.train_batches(
        small_data_dir, max_tokens=MAX_TOKENS, bucket_boundaries=boundaries, side_lengths=sides))
    real = sum(int((b[key] != PAD_ID).sum()) for b in batches for key in ("source", "target_in"))
    slots = sum(b[key].size for b in batches for key in ("source", "target_in"))
    fill = pipeline.position_fill(small_data_dir, "train", MAX_TOKENS, boundaries, sides)
    assert fill == pytest.approx(real / slots, abs=1e-12)


def test_bad_arguments_are_named(small_data_dir):
    with pytest.raises(ValueError, match="max_tokens 20 cannot hold the longest pair"):
        pipeline.train_batches(small_data_dir, max_tokens=20)
    with pytest.raises(ValueError, match="split 'test' not in the data directory"):
        pipeline.eval_batches(small_data_dir, "test", MAX_TOKENS)
    with pytest.raises(ValueError, match="shard_index 2 must be in"):
        pipeline.train_batches(small_data_dir, num_shards=2, shard_index=2)


def test_optimal_boundaries_pad_the_fewest_tokens():
    # multiples of 8 up to 24; {8, 24} pads 3 x 8 + 3 x 24 = 96 ids, {16, 24} 104, {24} 144
    lengths = np.array([3, 3, 3, 9, 9, 17])
    assert pipeline.optimal_boundaries(lengths, max_shapes=1) == [24]
    assert pipeline.optimal_boundaries(lengths, max_shapes=2) == [8, 24]
    assert pipeline.optimal_boundaries(lengths, max_shapes=3) == [8, 16, 24]


@pytest.mark.parametrize("step", [8, 1])
def test_optimal_boundaries_equal_an_exhaustive_search(step):
    lengths = np.random.default_rng(0).integers(1, 60, 300)
    top = -(-int(lengths.max()) // step) * step  # the longest, rounded up to a multiple
    candidates = list(range(step, top + 1, step))

    def padded(boundaries):
        return sum(next(b for b in boundaries if b >= n) for n in lengths)

    best = min((list(c) + [candidates[-1]] for k in range(3)
                for c in itertools.combinations(candidates[:-1], k)), key=padded)
    found = pipeline.optimal_boundaries(lengths, max_shapes=3, step=step)
    assert len(found) <= 3 and all(b % step == 0 for b in found)
    assert padded(found) == padded(best)


@pytest.mark.parametrize("step", [8, 1])
def test_fewest_position_boundaries_equal_an_exhaustive_search(step):
    # Training and validation pairs with short sources and long targets; 64 tokens a batch, so
    # the short last batch of a bucket costs as much as a full one. Only training is counted,
    # validation bounds the lengths.
    rng = np.random.default_rng(3)
    pairs = [(rng.integers(1, 12, n), np.minimum(60, 2 + rng.geometric(0.08, n)))
             for n in (120, 15)]
    longest = max(int(np.maximum(s, t).max()) for s, t in pairs)
    max_tokens, top = 64, -(-longest // step) * step
    candidates = list(range(step, top + 1, step))

    def positions(boundaries):
        rows = [pipeline.rows_for_length(max_tokens, length) for length in boundaries]
        every = [np.maximum(s, t) for s, t in pairs]
        total = 0
        for index, length in enumerate(boundaries):
            low = boundaries[index - 1] if index else 0
            held = [(low < n) & (n <= length) for n in every]
            if not any(h.any() for h in held):
                continue
            width = sum(min(length, -(-max(int(side[h].max(initial=0)) for side, h in
                                            zip(sides, held)) // step) * step)
                        for sides in zip(*pairs))
            total += -(-int(held[0].sum()) // rows[index]) * rows[index] * width
        return total

    best = min((list(c) + [candidates[-1]] for k in range(4)
                for c in itertools.combinations(candidates[:-1], k)), key=positions)
    found = pipeline.fewest_position_boundaries(pairs, max_tokens, max_shapes=4, step=step)
    assert len(found) <= 4 and all(b % step == 0 for b in found) and found[-1] >= longest
    assert positions(found) == positions(best)
    # The fewest pad tokens per pair (`optimal_boundaries`, blind to the short last batches and
    # to the sides' own lengths) costs more positions on these pairs.
    per_pair = pipeline.optimal_boundaries(np.concatenate([np.maximum(s, t) for s, t in pairs]),
                                           max_shapes=4, step=step)
    assert positions(per_pair) > positions(found)


def test_without_xla_batches_take_lengths_of_any_value_and_pad_fewer_tokens():
    # Under XLA each shape is compiled: at most 8 multiples of 8. Without it one traced program
    # runs them all: 16 lengths of any value.
    assert pipeline.shape_policy(True) == {"max_shapes": 8, "step": 8}
    assert pipeline.shape_policy(False) == {"max_shapes": 16, "step": 1}
    assert pipeline.shape_policy(True, 3) == {"max_shapes": 3, "step": 8}  # --max-shapes
    lengths = np.array([3, 3, 3, 9, 9, 17])
    assert pipeline.optimal_boundaries(lengths, **pipeline.shape_policy(False)) == [3, 9, 17]
    assert pipeline.optimal_boundaries(lengths, **pipeline.shape_policy(True)) == [8, 16, 24]


def test_every_batch_has_one_of_the_shapes_of_lengths_of_any_value(small_data_dir):
    boundaries = pipeline.bucket_boundaries_for(small_data_dir, **pipeline.shape_policy(False))
    assert len(boundaries) <= 16 and any(b % 8 for b in boundaries)
    shapes = {(rows, length) for rows, length, _ in pipeline.batch_shapes(MAX_TOKENS, boundaries)}
    batches = list(pipeline.train_batches(small_data_dir, max_tokens=MAX_TOKENS,
                                          bucket_boundaries=boundaries).as_numpy_iterator())
    assert {batch["source"].shape for batch in batches} <= shapes
    real = sum(int((b["target_out"] != PAD_ID).sum()) for b in batches)
    assert real == sum(int((b["target_out"] != PAD_ID).sum()) for b in pipeline.train_batches(
        small_data_dir, max_tokens=MAX_TOKENS).as_numpy_iterator())  # every pair, once


def test_training_data_tells_other_pairs_or_another_order_from_a_copy(small_data_dir, tmp_path):
    """What a checkpoint keeps of its training pairs: a copy of the directory gives the same,
    two pairs of one shard swapped (same counts) another, and so does a shard of other pairs."""
    data = DataDirectory.open(small_data_dir).training_data()
    meta = DataDirectory.open(small_data_dir).meta["splits"]["train"]
    assert (data["pairs"], data["target_tokens"]) == (meta["sentences"], meta["target_tokens"])
    copy = tmp_path / "copy"
    shutil.copytree(small_data_dir, copy)
    assert DataDirectory.open(copy).training_data() == data
    idx = copy / f"{meta['shards'][1]['name']}.idx"
    lengths = np.fromfile(idx, np.int32).reshape(2, -1)
    swap = next(i for i in range(lengths.shape[1] - 1)
                if tuple(lengths[:, i]) != tuple(lengths[:, i + 1]))
    lengths[:, [swap, swap + 1]] = lengths[:, [swap + 1, swap]]
    lengths.tofile(idx)
    manifest.write(copy)  # as if `vtx preprocess` had written it so
    swapped = DataDirectory.open(copy).training_data()
    assert swapped["lengths_sha256"] != data["lengths_sha256"]
    assert {**swapped, "lengths_sha256": None} == {**data, "lengths_sha256": None}


def test_a_damaged_data_directory_is_refused_naming_the_file(small_data_dir, tmp_path):
    """A shard cut short (full disk, interrupted copy) was read as fewer or emptier pairs and
    trained on without a word; a damaged meta.json or a missing vocabulary gave Python's bare
    error without the file."""
    def damaged(change, checked=False):
        """What opening a copy of the directory changed by `change` says; its manifest kept
        where `checked`, else removed (a directory an earlier vtx wrote: meta.json's checks)."""
        copy = tmp_path / f"copy{len(list(tmp_path.iterdir()))}"
        shutil.copytree(small_data_dir, copy)
        if not checked:
            (copy / manifest.NAME).unlink()
        change(copy)
        with pytest.raises(DataError) as refused:
            DataDirectory.open(copy)
        return str(refused.value).replace(str(copy), "DIR")

    def cut(path, keep):
        path.write_bytes(path.read_bytes()[:keep])

    shard = DataDirectory.open(small_data_dir).meta["splits"]["train"]["shards"][1]
    ids = shard["source_tokens"] + shard["target_tokens"]
    name = shard["name"]
    assert damaged(lambda d: cut(d / f"{name}.bin", 10)) == (
        f"DIR/{name}.bin holds 10 bytes where DIR/meta.json counts {ids:,} ids ({2 * ids:,} "
        f"bytes): cut short or from another run; run `vtx preprocess` again")
    assert damaged(lambda d: cut(d / f"{name}.idx", 8)).startswith(
        f"DIR/{name}.idx holds 8 bytes where DIR/meta.json counts {2 * shard['sentences']:,} "
        f"lengths")
    assert damaged(lambda d: (d / f"{name}.bin").unlink()) == (
        f"DIR/{name}.bin is missing: a shard DIR/meta.json names; run `vtx preprocess` again")
    assert damaged(lambda d: (d / "spm.model").unlink()).startswith("DIR/spm.model is missing")
    assert damaged(lambda d: cut(d / "meta.json", 40)).startswith(
        "DIR/meta.json: not readable as JSON (")
    # With its manifest, what meta.json cannot tell: the vocabulary's bytes, a file added, a
    # link leaving the directory (the vocabulary the run would read is another's).
    def flip_last_byte(path):
        data = bytearray(path.read_bytes())
        data[-1] ^= 1
        path.write_bytes(bytes(data))

    assert damaged(lambda d: flip_last_byte(d / "spm.model"), checked=True) == (
        "DIR/spm.model changed after it was written: its SHA-256 is not the one "
        "DIR/SHA256SUMS lists (damaged or edited)")
    assert damaged(lambda d: (d / "notes.txt").write_text("x"), checked=True) == (
        "DIR/notes.txt is not in DIR/SHA256SUMS: added after the directory was written; "
        "remove it")
    elsewhere = tmp_path / "elsewhere.model"
    shutil.copy(small_data_dir / "spm.model", elsewhere)

    def linked(d):
        (d / "spm.model").unlink()
        (d / "spm.model").symlink_to(elsewhere)

    assert damaged(linked, checked=True) == (
        f"DIR/spm.model is a symbolic link to {elsewhere}, outside DIR: not read")


def test_fits_buckets_holds_a_pair_where_its_bucket_holds_each_side():
    """Bucket 8 holds sides up to (6, 8), bucket 16 up to (16, 12); none holds past 16."""
    source = np.array([6, 7, 8, 9, 16, 9, 17])
    target = np.array([8, 8, 3, 12, 12, 13, 2])
    held = pipeline.fits_buckets(source, target, [16, 8], [(6, 8), (16, 12)])
    assert held.tolist() == [True, False, False, True, True, False, False]
    assert pipeline.fits_buckets(source, target, [8, 16]).tolist() == [True] * 6 + [False]
