"""`--ema` of translate, parse, average-checkpoints and export: the checkpoint's EMA weights (kept
by `vtx train --ema-decay`) in place of its weights; a checkpoint without one is named."""

import dataclasses

import numpy as np
import pytest
from click.testing import CliRunner

from vtx import checkpoints
from vtx_cli.main import main

SENTENCES = "A dog runs .\nTwo men are playing football in a park .\n"


def invoke(*args, stdin=None):
    return CliRunner().invoke(main, [str(a) for a in args], input=stdin)


def with_ema_of(source, path, scale=0.0, step_offset=0):
    """A checkpoint at `path` whose EMA holds `source`'s weights and whose weights are those
    times `scale` (the integer variables kept): only --ema decodes as `source` does."""
    checkpoint = checkpoints.load(source)
    weights = [array * np.asarray(scale, array.dtype)
               if np.issubdtype(array.dtype, np.floating) else array
               for array in checkpoint.model]
    meta = {**checkpoint.meta, "step": checkpoint.meta["step"] + step_offset}
    checkpoints.save(path, dataclasses.replace(checkpoint, model=weights, ema=checkpoint.model,
                                               meta=meta))
    return path


@pytest.mark.parametrize("command, fixture", [("translate", "trained_checkpoint"),
                                              ("parse", "random_parser_checkpoint")])
def test_ema_decodes_with_the_averaged_weights(request, tmp_path, command, fixture):
    source = request.getfixturevalue(fixture)
    averaged = with_ema_of(source, tmp_path / "ema.npz")
    plain = invoke(command, "--checkpoint", source, "--beam", 2, stdin=SENTENCES)
    assert plain.exit_code == 0, plain.output
    ema = invoke(command, "--checkpoint", averaged, "--ema", "--beam", 2, stdin=SENTENCES)
    assert ema.exit_code == 0, ema.output
    weights = invoke(command, "--checkpoint", averaged, "--beam", 2, stdin=SENTENCES)
    assert weights.exit_code == 0, weights.output
    # A random parser's trees are all repaired into flat ones: its repairs tell the models apart.
    said = {name: [line for line in result.stderr.splitlines() if line.startswith("repairs:")]
            for name, result in (("plain", plain), ("ema", ema), ("weights", weights))}
    assert (ema.stdout, said["ema"]) == (plain.stdout, said["plain"])
    assert (weights.stdout, said["weights"]) != (plain.stdout, said["plain"])


@pytest.mark.parametrize("command", ["translate", "parse", "export", "average-checkpoints"])
def test_ema_of_a_checkpoint_without_one_is_refused_naming_it(request, tmp_path, command):
    source = request.getfixturevalue("random_parser_checkpoint" if command == "parse"
                                     else "trained_checkpoint")
    args = {"translate": ["--checkpoint", source],
            "parse": ["--checkpoint", source],
            "export": ["--checkpoint", source, "--format", "ctranslate2", "--output",
                       tmp_path / "out"],
            "average-checkpoints": ["--inputs", source, "--output", tmp_path / "avg.npz"]}
    result = invoke(command, *args[command], "--ema", stdin=SENTENCES)
    assert result.exit_code == 1
    assert (f"Error: {source} holds no EMA of its weights (its run trained without --ema-decay): "
            f"leave --ema out to use its weights") in result.output
    assert not (tmp_path / "out").exists() and not (tmp_path / "avg.npz").exists()


def test_average_checkpoints_ema_averages_the_averaged_weights(trained_checkpoint, tmp_path):
    first = with_ema_of(trained_checkpoint, tmp_path / "a.npz", scale=0.5)
    second = tmp_path / "b.npz"
    checkpoint = checkpoints.load(first)
    doubled = [a * np.asarray(3, a.dtype) if np.issubdtype(a.dtype, np.floating) else a
               for a in checkpoint.ema]
    checkpoints.save(second, dataclasses.replace(
        checkpoint, ema=doubled, meta={**checkpoint.meta, "step": checkpoint.meta["step"] + 1}))
    result = invoke("average-checkpoints", "--inputs", first, "--inputs", second, "--ema",
                    "--output", tmp_path / "avg.npz")
    assert result.exit_code == 0, result.output
    averaged = checkpoints.load(tmp_path / "avg.npz")
    assert averaged.meta["weights"] == "ema" and averaged.ema is None
    for mine, original in zip(averaged.model, checkpoints.load(trained_checkpoint).model):
        if np.issubdtype(original.dtype, np.floating):  # (1 + 3) / 2 times the weights
            np.testing.assert_allclose(mine, original * 2, rtol=1e-6)


def test_export_ema_writes_the_averaged_weights(trained_checkpoint, tmp_path):
    averaged = with_ema_of(trained_checkpoint, tmp_path / "ema.npz")
    for name, args in (("plain", [trained_checkpoint]), ("ema", [averaged, "--ema"]),
                       ("weights", [averaged])):
        result = invoke("export", "--checkpoint", *args, "--format", "ctranslate2", "--output",
                        tmp_path / name)
        assert result.exit_code == 0, result.output
    model = {name: (tmp_path / name / "model.bin").read_bytes()
             for name in ("plain", "ema", "weights")}
    assert model["ema"] == model["plain"] != model["weights"]
