import json
import os
import subprocess
import sys
from pathlib import Path

from tests.cli.in_process import vtx_in_process
from tests.cli.stderr import vtx_lines

VTX = str(Path(sys.executable).with_name("vtx"))


def vtx(*args, stdin=b"", env=None):
    """`vtx` with `stdin`, in this process unless `env` asks for a process of its own."""
    if env is None:
        return vtx_in_process(*args, stdin=stdin)
    return subprocess.run([VTX, *map(str, args)], input=stdin, capture_output=True, timeout=300,
                          env=env)


def test_score_rescores_translates_nbest_output_and_writes_jsonl(trained_checkpoint, tmp_path):
    # float32 on both sides: in bfloat16 (auto's choice on a CPU with avx512_bf16 or AMX) the
    # search's step-by-step pass and the scoring's whole one round differently.
    (tmp_path / "src.en").write_text("A man is riding a bike.\nTwo dogs play.\n")
    nbest = vtx("translate", "--checkpoint", trained_checkpoint, "--input", tmp_path / "src.en",
                "--nbest", "2", "--output", tmp_path / "nbest.de", "--precision", "float32")
    assert nbest.returncode == 0, nbest.stderr.decode()
    result = vtx("score", "--checkpoint", trained_checkpoint, "--input", tmp_path / "src.en",
                 "--target", tmp_path / "nbest.de", "--nbest", "2", "--output-format", "jsonl",
                 "--precision", "float32")
    assert result.returncode == 0, result.stderr.decode()
    records = [json.loads(line) for line in result.stdout.decode().splitlines()]
    written = (tmp_path / "nbest.de").read_text().splitlines()
    assert [(r["id"], r["rank"]) for r in records] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    for record, line in zip(records, written):
        score, text = line.split("\t")
        assert record["target"] == text and abs(record["score"] - float(score)) < 2e-4
        assert len(record["positional_scores"]) == len(record["tokens"]) + 1
        assert abs(sum(record["positional_scores"]) - record["logprob"]) < 1e-4


def test_a_target_of_another_length_is_one_line_naming_the_flags(trained_checkpoint, tmp_path):
    (tmp_path / "hyp.de").write_text("Ein Hund.\n")
    result = vtx("score", "--checkpoint", trained_checkpoint, "--target", tmp_path / "hyp.de",
                 "--nbest", "1", stdin=b"A dog.\nA cat.\n")
    assert result.returncode == 1
    assert result.stderr.decode().splitlines()[-1] == (
        f"Error: --target {tmp_path / 'hyp.de'} has 1 lines; --nbest 1 per line of the "
        f"2-line input needs 2")


def test_the_log_lines_say_the_precision_then_whether_the_pass_is_compiled_and_jit_scores_alike(
        trained_checkpoint, tmp_path):
    """`auto` (no flag) compiles only where TensorFlow sees a GPU: here none (hidden from it);
    `--jit` compiles the forward pass, which scores as the plain one (in float32: bfloat16's
    rounding differs between XLA's fused kernels and the plain ones)."""
    (tmp_path / "src.en").write_text("A man is riding a bike.\nTwo dogs play.\n")
    (tmp_path / "hyp.de").write_text("Ein Mann fährt Fahrrad.\nZwei Hunde spielen.\n")
    no_gpu = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    scores = []
    for flags, said in (([], "scoring: XLA off (auto: no GPU; XLA decodes slower on a CPU)"),
                        (["--jit"], "scoring: XLA on (--jit)")):
        result = vtx("score", "--checkpoint", trained_checkpoint, "--input", tmp_path / "src.en",
                     "--target", tmp_path / "hyp.de", "--precision", "float32", *flags,
                     env=no_gpu)
        assert result.returncode == 0, result.stderr.decode()
        first, second = vtx_lines(result.stderr.decode())[:2]
        assert first.startswith("precision: ") and second == said
        scores.append([float(line.split("\t")[0]) for line in result.stdout.decode().splitlines()])
    assert len(scores[0]) == 2
    assert all(abs(plain - compiled) < 1e-4 for plain, compiled in zip(*scores))


def test_bfloat16_scores_are_float32_s_to_its_rounding(trained_checkpoint, tmp_path):
    """bfloat16 (emulated on a CPU without it: the same numbers, slower) keeps about 3 digits of
    each product; the scores it sums stay near float32's, and the search's side is float32."""
    (tmp_path / "src.en").write_text("A man is riding a bike.\nTwo dogs play in the snow.\n")
    (tmp_path / "hyp.de").write_text("Ein Mann fährt Fahrrad.\nZwei Hunde spielen im Schnee.\n")
    scores = {}
    for precision in ("float32", "bfloat16"):
        result = vtx("score", "--checkpoint", trained_checkpoint, "--input", tmp_path / "src.en",
                     "--target", tmp_path / "hyp.de", "--precision", precision)
        assert result.returncode == 0, result.stderr.decode()
        assert vtx_lines(result.stderr.decode())[0].startswith(f"precision: {precision}")
        scores[precision] = [float(line.split("\t")[0])
                             for line in result.stdout.decode().splitlines()]
    assert len(scores["bfloat16"]) == 2 and scores["bfloat16"] != scores["float32"]
    for single, full in zip(scores["bfloat16"], scores["float32"]):
        assert abs(single - full) <= 0.02 * abs(full) + 0.02
