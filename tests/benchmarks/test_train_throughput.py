"""The training-throughput benchmark's inputs and its PyTorch reference (not a timed test)."""

import sys
from pathlib import Path

import numpy as np
import pytest

from vtx.config import BOS_ID, EOS_ID, PAD_ID, preset

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import train_throughput  # noqa: E402


def test_synthetic_batches_shift_the_target_by_one_and_hold_no_padding():
    batches = train_throughput.synthetic_batches(vocab_size=50, tokens=100, length=8, count=2)
    assert len(batches) == 2
    for batch in batches:
        assert {k: v.shape for k, v in batch.items()} == {
            "source": (12, 8), "target_in": (12, 8), "target_out": (12, 8)}
        assert (batch["target_in"][:, 0] == BOS_ID).all()
        assert (batch["target_out"][:, -1] == EOS_ID).all()
        np.testing.assert_array_equal(batch["target_in"][:, 1:], batch["target_out"][:, :-1])
        assert (batch["source"] != PAD_ID).all() and (batch["target_out"] != PAD_ID).all()
        assert batch["source"].max() < 50


def test_torch_reference_has_the_parameter_count_of_vtx():
    pytest.importorskip("torch")
    import torch_reference

    from vtx.models import transformer

    tiny = preset("tiny")
    reference = torch_reference.build(tiny.to_dict(), threads=1)
    assert sum(p.numel() for p in reference.parameters()) == transformer.build(tiny).count_params()
    base = torch_reference.build(preset("base").to_dict(), threads=1)
    assert sum(p.numel() for p in base.parameters()) == 63_082_496


def test_torch_reference_update_lowers_the_loss_on_a_repeated_batch():
    pytest.importorskip("torch")
    import torch_reference

    config = preset("tiny", dropout=0.0).to_dict()
    model = torch_reference.build(config, threads=1)
    # A short warm-up, so that three updates move the weights visibly (lr 1.25e-4 .. 3.75e-4).
    step = torch_reference.make_step(model, 0.1, bfloat16=False, warmup_steps=100)
    batch = torch_reference.to_tensors(train_throughput.synthetic_batches(1000, 64, 8, count=1)[0])
    losses = [step(batch) for _ in range(4)]
    assert losses[-1] < losses[0] - 1.0, losses
