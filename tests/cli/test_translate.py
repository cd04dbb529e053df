import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from tests.cli.in_process import vtx_in_process
from tests.cli.stderr import vtx_lines
from vtx import checkpoints
from vtx_cli.main import main

VTX = str(Path(sys.executable).with_name("vtx"))


def vtx(*args, stdin=b"", env=None):
    """`vtx` with `stdin`, in this process unless `env` asks for a process of its own."""
    if env is None:
        return vtx_in_process(*args, stdin=stdin)
    return subprocess.run([VTX, *map(str, args)], input=stdin, capture_output=True, timeout=300,
                          env=env)


def test_issue_example_prints_three_lines_the_second_empty(trained_checkpoint):
    result = vtx("translate", "--checkpoint", trained_checkpoint.parent,
                 stdin=b"A man is riding a bike.\n\nTwo dogs play.\n")
    assert result.returncode == 0, result.stderr.decode()
    lines = result.stdout.decode().split("\n")
    assert len(lines) == 4 and lines[3] == ""
    assert lines[0] and lines[1] == "" and lines[2]
    # The summary, on standard error: the empty line counted, its empty output no word.
    words = len(lines[0].split()) + len(lines[2].split())
    assert f"translated 3 lines ({words} words out) in " in result.stderr.decode()


def test_reference_prints_sacrebleu_score_and_signature(trained_checkpoint, multi30k_small, tmp_path):
    source = (multi30k_small / "test_2016_flickr.en").read_text().splitlines()[:20]
    reference = (multi30k_small / "test_2016_flickr.de").read_text().splitlines()[:20]
    (tmp_path / "ref.de").write_text("\n".join(reference) + "\n")
    out = tmp_path / "hyp.de"
    result = vtx("translate", "--checkpoint", trained_checkpoint, "--output", out,
                 "--reference", tmp_path / "ref.de", stdin=("\n".join(source) + "\n").encode())
    stderr = result.stderr.decode()
    assert result.returncode == 0, stderr
    assert "BLEU = " in stderr and "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:" in stderr
    assert len(out.read_text().splitlines()) == 20
    assert not [p for p in tmp_path.iterdir() if ".tmp" in p.name]


def test_a_reference_of_another_length_is_one_line_naming_the_flag(trained_checkpoint, tmp_path):
    (tmp_path / "ref.de").write_text("Ein Hund.\n")
    result = vtx("translate", "--checkpoint", trained_checkpoint, "--reference",
                 tmp_path / "ref.de", stdin=b"A dog.\nA cat.\n")
    assert result.returncode == 1
    assert result.stderr.decode().splitlines()[-1] == (
        f"Error: --reference {tmp_path / 'ref.de'} has 1 lines, the input 2")


def test_a_gzip_reference_is_read_as_gzip_like_the_input(trained_checkpoint, tmp_path):
    """`--input test.en.gz` was decompressed but `--reference test.de.gz` was not: the search
    ran, then its bytes stopped the command as invalid UTF-8."""
    import gzip

    with gzip.open(tmp_path / "ref.de.gz", "wt") as handle:
        handle.write("Ein Hund.\nEine Katze.\n")
    result = vtx("translate", "--checkpoint", trained_checkpoint, "--reference",
                 tmp_path / "ref.de.gz", stdin=b"A dog.\nA cat.\n")
    assert result.returncode == 0, result.stderr.decode()
    assert "BLEU = " in result.stderr.decode()


def test_a_reference_of_another_length_than_the_input_file_is_refused_before_the_search(
        trained_checkpoint, tmp_path):
    (tmp_path / "in.en").write_text("A dog.\nA cat.\n")
    (tmp_path / "ref.de").write_text("Ein Hund.\n")
    result = vtx("translate", "--checkpoint", trained_checkpoint, "--input", tmp_path / "in.en",
                 "--output", tmp_path / "out.de", "--reference", tmp_path / "ref.de")
    assert result.returncode == 1
    stderr = result.stderr.decode()
    assert stderr.splitlines()[-1] == (
        f"Error: --reference {tmp_path / 'ref.de'} has 1 lines, the input 2")
    assert "checkpoint:" not in stderr  # said before the model loaded, not after the search
    assert not (tmp_path / "out.de").exists()


def test_invalid_utf8_is_an_error_naming_the_line(trained_checkpoint):
    """It was replaced by U+FFFD with a warning and searched, exit 0: a gzip file or another
    encoding gave a file of nonsense. The lines read with it are not translated either."""
    result = vtx("translate", "--checkpoint", trained_checkpoint, stdin=b"A dog.\nA \xff cat.\n")
    assert result.returncode == 1 and result.stdout == b""
    assert ("Error: standard input:2: invalid UTF-8 (bytes b'\\xff' at column 3)"
            in result.stderr.decode())


def test_nbest_writes_k_scored_lines_per_input(trained_checkpoint):
    result = vtx("translate", "--checkpoint", trained_checkpoint, "--nbest", 2,
                 stdin=b"A dog.\n\nA cat.\n")
    lines = result.stdout.decode().splitlines()
    assert len(lines) == 6
    for line in (lines[0], lines[1], lines[4], lines[5]):
        score, text = line.split("\t")
        assert float(score) <= 0 and text


def test_stop_fairseq_translates_and_an_unknown_rule_names_the_flag(trained_checkpoint):
    result = vtx("translate", "--checkpoint", trained_checkpoint, "--stop", "fairseq",
                 stdin=b"A man is riding a bike.\nTwo dogs play.\n")
    assert result.returncode == 0, result.stderr.decode()
    assert len(result.stdout.decode().splitlines()) == 2
    refused = vtx("translate", "--checkpoint", trained_checkpoint, "--stop", "soon")
    assert refused.returncode == 2 and b"--stop" in refused.stderr and b"soon" in refused.stderr


def test_lenpen_formula_picks_the_penalty_and_length_penalty_names_it(tmp_path):
    """--lenpen is alpha, --lenpen-formula the penalty's form; the form's former name,
    --length-penalty, is a usage error naming the flag to use, in every decoding command."""
    for command in ("translate", "parse", "export"):
        refused = vtx(command, "--checkpoint", tmp_path, "--length-penalty", "fairseq")
        assert refused.returncode == 2, refused.stderr.decode()
        assert ("no such option: --length-penalty; use --lenpen-formula"
                in refused.stderr.decode())
    refused = vtx("translate", "--checkpoint", tmp_path, "--lenpen-formula", "average")
    assert refused.returncode == 2 and b"'average' is not one of 'gnmt', 'fairseq'" in (
        refused.stderr)


def test_missing_checkpoint_is_a_clear_error(tmp_path):
    result = vtx("translate", "--checkpoint", tmp_path)
    assert result.returncode == 1
    assert b"Traceback" not in result.stderr
    assert f"--checkpoint {tmp_path}: no checkpoint_*.npz" in result.stderr.decode()


def test_checkpoint_without_vocabulary_is_refused(trained_checkpoint, tmp_path):
    checkpoint = checkpoints.load(trained_checkpoint)
    checkpoint.vocab = None
    checkpoints.save(tmp_path / "novocab.npz", checkpoint)
    result = vtx("translate", "--checkpoint", tmp_path / "novocab.npz", stdin=b"A dog.\n")
    assert result.returncode == 1
    assert b"Traceback" not in result.stderr
    assert "carries no vocabulary" in result.stderr.decode()


def test_vocabulary_that_does_not_match_the_model_is_refused(trained_checkpoint, multi30k_small,
                                                             tmp_path):
    checkpoint = checkpoints.load(trained_checkpoint)
    checkpoint.meta["model_config"]["vocab_size"] = 999
    checkpoint.model = [np.zeros((999,) + a.shape[1:], a.dtype) if a.shape[:1] == (1000,) else a
                        for a in checkpoint.model]
    checkpoints.save(tmp_path / "mismatch.npz", checkpoint)
    result = vtx("translate", "--checkpoint", tmp_path / "mismatch.npz", stdin=b"A dog.\n")
    assert result.returncode == 1
    assert b"Traceback" not in result.stderr
    assert "vocabulary has 1000 pieces but the model 999 embeddings" in result.stderr.decode()


def test_a_file_that_is_not_a_checkpoint_is_refused(tmp_path):
    (tmp_path / "junk.npz").write_text("junk")
    result = vtx("translate", "--checkpoint", tmp_path / "junk.npz", stdin=b"A dog.\n")
    assert result.returncode == 1
    assert b"Traceback" not in result.stderr
    assert "not a readable vtx checkpoint" in result.stderr.decode()


def test_output_into_a_missing_directory_is_a_clear_error(trained_checkpoint, tmp_path):
    result = vtx("translate", "--checkpoint", trained_checkpoint, "--output",
                 tmp_path / "nowhere" / "out.txt", stdin=b"A dog.\n")
    assert result.returncode == 1
    assert b"Traceback" not in result.stderr and b"nowhere" in result.stderr


def test_a_pipe_fed_one_line_at_a_time_gets_each_translation_before_the_next_line(
        trained_checkpoint):
    """--buffer-size 1, as an interactive user: each output line comes back while the input pipe
    is still open and the next line not yet written."""
    import select

    process = subprocess.Popen([VTX, "translate", "--checkpoint", str(trained_checkpoint),
                                "--buffer-size", "1"], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        for line in (b"A man is riding a bike.\n", b"\n", b"Two dogs play in the snow.\n"):
            process.stdin.write(line)
            process.stdin.flush()
            ready, _, _ = select.select([process.stdout], [], [], 240)
            assert ready, f"no output for {line!r} while the input stays open"
            answer = process.stdout.readline()
            assert answer.endswith(b"\n") and (answer.strip() != b"") == (line.strip() != b"")
        process.stdin.close()
        assert process.stdout.read() == b""  # nothing held back
        assert process.wait(timeout=300) == 0
    finally:
        process.kill()


def test_a_closed_standard_input_is_one_line_naming_input(trained_checkpoint):
    # Started with stdin closed (`<&-`), Python has no sys.stdin: an AttributeError before.
    result = subprocess.run([VTX, "translate", "--checkpoint", str(trained_checkpoint)],
                            stdin=subprocess.DEVNULL, preexec_fn=lambda: os.close(0),
                            capture_output=True, timeout=300)
    assert result.returncode == 1 and b"Traceback" not in result.stderr
    assert b"Error: standard input is closed: give --input" in result.stderr


def test_sampling_is_reproducible_by_seed_and_prints_nbest_scored_lines(trained_checkpoint):
    stdin = b"A man is riding a bike.\nTwo dogs play.\n"
    args = ["translate", "--checkpoint", trained_checkpoint, "--sampling", "--nbest", "2",
            "--sampling-topp", "0.9", "--seed", "3"]
    first, again = vtx(*args, stdin=stdin), vtx(*args, stdin=stdin)
    assert first.returncode == 0, first.stderr.decode()
    lines = first.stdout.decode().splitlines()
    assert len(lines) == 4 and all(len(line.split("\t")) == 2 for line in lines)
    assert again.stdout == first.stdout
    # the second line alone, as line 2 of its input: its samples
    alone = vtx(*args, stdin=b"\nTwo dogs play.\n")
    assert alone.stdout.decode().splitlines()[2:] == lines[2:]


def test_a_mode_flag_without_its_mode_or_with_a_flag_it_ignores_is_refused(trained_checkpoint):
    for args, message in ((["--sampling-topk", "5"], "--sampling-topk needs --sampling"),
                          (["--temperature", "0.5"], "--temperature needs --sampling"),
                          (["--sampling", "--beam", "5"], "--beam has no use with --sampling"),
                          (["--sampling", "--stop", "never"],
                           "--stop has no use with --sampling")):
        result = vtx("translate", "--checkpoint", trained_checkpoint, *args, stdin=b"A dog.\n")
        assert result.returncode == 2
        assert message in result.stderr.decode()


def test_jsonl_gives_a_record_per_input_line_with_tokens_and_positional_scores(
        trained_checkpoint):
    import json

    result = vtx("translate", "--checkpoint", trained_checkpoint, "--output-format", "jsonl",
                 "--nbest", "2", stdin=b"A man is riding a bike.\n\nTwo dogs play.\n")
    assert result.returncode == 0, result.stderr.decode()
    records = [json.loads(line) for line in result.stdout.decode().splitlines()]
    assert [(r["id"], r["source"]) for r in records] == [
        (0, "A man is riding a bike."), (1, ""), (2, "Two dogs play.")]
    assert records[1]["hypotheses"] == []
    text = vtx("translate", "--checkpoint", trained_checkpoint, "--nbest", "2",
               stdin=b"A man is riding a bike.\n\nTwo dogs play.\n").stdout.decode()
    lines = text.splitlines()
    for record, first in ((records[0], 0), (records[2], 4)):
        assert [f"{h['score']:.4f}\t{h['text']}" for h in record["hypotheses"]] == \
            lines[first:first + 2]
        for hypothesis in record["hypotheses"]:
            assert "".join(hypothesis["tokens"]).replace("\u2581", " ").strip() == \
                hypothesis["text"]
            assert len(hypothesis["positional_scores"]) == len(hypothesis["tokens"]) + 1


def test_prefix_starts_every_output_and_a_prefix_file_of_another_length_is_refused(
        trained_checkpoint, tmp_path):
    (tmp_path / "src.en").write_text("A man is riding a bike.\nTwo dogs play.\n")
    (tmp_path / "prefix.de").write_text("Ein Hund\n\n")
    result = vtx("translate", "--checkpoint", trained_checkpoint, "--input",
                 tmp_path / "src.en", "--prefix", tmp_path / "prefix.de")
    assert result.returncode == 0, result.stderr.decode()
    lines = result.stdout.decode().splitlines()
    assert lines[0].startswith("Ein Hund ") and len(lines) == 2
    (tmp_path / "short.de").write_text("Ein Hund\n")
    for args in (["--input", tmp_path / "src.en"], []):  # counted first, or as it is read
        refused = vtx("translate", "--checkpoint", trained_checkpoint, *args, "--prefix",
                      tmp_path / "short.de", "--output", tmp_path / "out.de",
                      stdin=b"A man is riding a bike.\nTwo dogs play.\n")
        assert refused.returncode == 1
        assert refused.stderr.decode().splitlines()[-1].startswith(
            f"Error: --prefix {tmp_path / 'short.de'} has 1 lines, the input ")
        assert not (tmp_path / "out.de").exists()


def test_an_ensemble_of_two_copies_translates_as_one_and_vocabularies_must_match(
        trained_checkpoint, random_parser_checkpoint):
    stdin = b"A man is riding a bike.\nTwo dogs play.\n"
    one = vtx("translate", "--checkpoint", trained_checkpoint, "--nbest", "2", stdin=stdin)
    two = vtx("translate", "--checkpoint", trained_checkpoint, "--checkpoint",
              trained_checkpoint.parent, "--nbest", "2", stdin=stdin)
    assert two.returncode == 0, two.stderr.decode()
    texts = lambda result: [line.split("\t")[1] for line in result.stdout.decode().splitlines()]
    assert texts(two) == texts(one)
    mixed = vtx("translate", "--checkpoint", trained_checkpoint, "--checkpoint",
                random_parser_checkpoint, stdin=stdin)
    assert mixed.returncode == 1
    assert mixed.stderr.decode().splitlines()[-1].startswith(
        f"Error: --checkpoint {trained_checkpoint} and --checkpoint {random_parser_checkpoint} "
        f"have different vocabularies")


def test_print_alignment_ends_each_line_with_its_pairs_and_fills_the_jsonl_field(
        trained_checkpoint):
    import json

    stdin = b"A man is riding a bike.\n\nTwo dogs play.\n"
    text = vtx("translate", "--checkpoint", trained_checkpoint, "--print-alignment",
               stdin=stdin)
    assert text.returncode == 0, text.stderr.decode()
    lines = [line.split("\t") for line in text.stdout.decode().splitlines()]
    assert [len(fields) for fields in lines] == [2, 2, 2] and lines[1] == ["", ""]
    records = [json.loads(line) for line in vtx(
        "translate", "--checkpoint", trained_checkpoint, "--print-alignment",
        "--alignment-layer", "0", "--output-format", "jsonl", stdin=stdin).stdout.splitlines()]
    for record in (records[0], records[2]):
        pairs = record["hypotheses"][0]["alignment"].split()
        assert len(pairs) == len(record["hypotheses"][0]["tokens"])
    refused = vtx("translate", "--checkpoint", trained_checkpoint, "--alignment-layer", "1",
                  stdin=stdin)
    assert refused.returncode == 2
    assert "--alignment-layer needs --print-alignment" in refused.stderr.decode()


def invoke(*args, stdin=None):
    """`vtx` in this process (no interpreter to start): for refusals and short runs."""
    from click.testing import CliRunner

    from vtx_cli.main import main

    return CliRunner().invoke(main, [str(a) for a in args], input=stdin)


def test_constrained_jsonl_hypotheses_hold_their_line_s_phrases(trained_checkpoint, tmp_path):
    import json

    (tmp_path / "src.en").write_text("A man is riding a bike.\nTwo dogs play.\n")
    (tmp_path / "constraints.de").write_text("Hund\tFahrrad\n\n")
    result = invoke("translate", "--checkpoint", trained_checkpoint, "--input",
                    tmp_path / "src.en", "--constraints", tmp_path / "constraints.de",
                    "--nbest", "2", "--output-format", "jsonl")
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in result.stdout.splitlines()]
    assert [len(record["hypotheses"]) for record in records] == [2, 2]
    assert records[0]["hypotheses"][0]["finished"]
    for hypothesis in records[0]["hypotheses"]:
        if hypothesis["finished"]:
            assert "Hund" in hypothesis["text"] and "Fahrrad" in hypothesis["text"]


def test_a_bad_constraints_file_or_mode_is_refused_naming_it(trained_checkpoint, tmp_path):
    (tmp_path / "src.en").write_text("A man is riding a bike.\nTwo dogs play.\n")
    (tmp_path / "short.de").write_text("Hund\n")
    (tmp_path / "blank.de").write_text("\nHund\t \n")
    (tmp_path / "good.de").write_text("Hund\n\n")
    source = ["--input", tmp_path / "src.en"]
    for args, message in (
            ([*source, "--constraints", tmp_path / "short.de"],
             f"Error: --constraints {tmp_path / 'short.de'} has 1 lines, the input 2"),
            (["--constraints", tmp_path / "short.de"],  # standard input: counted as it is read
             f"Error: --constraints {tmp_path / 'short.de'} has 1 lines, the input more"),
            ([*source, "--constraints", tmp_path / "blank.de"],
             f"Error: --constraints {tmp_path / 'blank.de'} line 2: the constraint ' ' "
             f"encodes to no pieces"),
            ([*source, "--constraints", tmp_path / "good.de", "--sampling"],
             "Error: --constraints and --sampling exclude each other"),
            ([*source, "--constraints", tmp_path / "good.de", "--jit"],
             "Error: --constraints and --jit exclude each other")):
        result = invoke("translate", "--checkpoint", trained_checkpoint, *args,
                        "--output", tmp_path / "out.de",
                        stdin="A man is riding a bike.\nTwo dogs play.\n")
        assert result.exit_code == 1 and message in result.output, result.output
        assert not (tmp_path / "out.de").exists()


def test_the_log_lines_say_the_precision_then_whether_the_search_is_compiled_and_why(trained_checkpoint):
    """`auto` (no flag) compiles only where TensorFlow sees a GPU: here none (hidden from it);
    `--jit` and `--no-jit` choose, as typed before `auto` existed. The third line: the search
    threads (--search-threads, default 2) and their share of the cores."""
    no_gpu = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    outputs = set()
    for flags, said in (([], "search: XLA off (auto: no GPU; XLA decodes slower on a CPU)"),
                        (["--jit"], "search: XLA on (--jit)"),
                        (["--no-jit"], "search: XLA off (--no-jit)")):
        result = vtx("translate", "--checkpoint", trained_checkpoint, *flags,
                     stdin=b"A man is riding a bike.\n", env=no_gpu)
        assert result.returncode == 0, result.stderr.decode()
        first, second, third = vtx_lines(result.stderr.decode())[:3]
        assert first.startswith("precision: ") and second == said
        cores = len(os.sched_getaffinity(0))
        assert third == (f"vtx translate: 2 search threads, each operation on "
                         f"{max(1, cores // 2)} of the {cores} cores")
        outputs.add(result.stdout)
    assert len(outputs) == 1


@pytest.mark.parametrize("command", ["translate", "parse"])
def test_search_threads_out_of_range_are_refused_naming_flag_and_value(command):
    result = CliRunner().invoke(main, [command, "--search-threads", "0"])
    assert result.exit_code == 2
    assert "Invalid value for '--search-threads': 0 is not in the range 1<=x<=16" in \
        result.output
