"""Task metrics at validation time (`vtx train --eval-bleu / --eval-f1`): the scorers agree with
`vtx translate` / `vtx parse` on the same weights, checkpoint_best follows the chosen metric, and
--patience stops a run that no longer improves."""

import gzip
import json
import os
import shutil
import signal

import numpy as np
import pytest
from click.testing import CliRunner

from tests.inference.parser_checkpoint import write_random_parser
from tests.training.synthetic import epoch_maker, make_pairs
from tests.training.test_trainer_saving import make_trainer, saved_steps
from vtx import checkpoints
from vtx.training.validation import Score, ValidationScorer
from vtx_cli.main import main


def test_bleu_scorer_equals_sacrebleu_of_vtx_translate(trained_checkpoint, shared_data, tmp_path):
    from vtx.inference.decoding import DecodeOptions
    from vtx.inference.translate import bleu
    from vtx.inference.translator import load_translator

    with gzip.open(shared_data / "multi30k" / "val.en.gz", "rt") as handle:
        sources = [next(handle).strip() for _ in range(40)]
    with gzip.open(shared_data / "multi30k" / "val.de.gz", "rt") as handle:
        targets = [next(handle).strip() for _ in range(40)]
    translator = load_translator(trained_checkpoint, DecodeOptions(beam=4, lenpen=0.6))
    vocab = translator.vocab
    pairs = [(translator.encode(s, i), vocab.encode(t)) for i, (s, t) in
             enumerate(zip(sources, targets))]
    score = ValidationScorer(translator.model, vocab, pairs, "bleu")()

    hypotheses = [h[0].text for h in translator.translate(sources)]
    assert len(set(hypotheses)) > 30  # a model whose outputs follow its input
    references = tmp_path / "references.de"
    references.write_text("".join(vocab.decode(target) + "\n" for _, target in pairs))
    expected = bleu(hypotheses, references)[0]
    assert score.metric == "bleu" and score.summary == expected
    assert 10 < score.value < 100


@pytest.fixture(scope="module")
def random_parser(shared_data, tmp_path_factory):
    folder = tmp_path_factory.mktemp("parser")
    files = sorted((shared_data / "ptb_sample").glob("wsj_000[1-4].mrg"))
    return write_random_parser(folder, files), files


@pytest.mark.slow
def test_f1_scorer_equals_vtx_parse_with_gold_constrained_or_not(random_parser, tmp_path):
    from vtx.inference.decoding import DecodeOptions
    from vtx.inference.parse import parse_lines, read_gold
    from vtx.inference.translator import load_translator
    from vtx.parsing import evalb
    from vtx.parsing.prepare import split_lines

    checkpoint, files = random_parser
    lines = split_lines(files)[0][:20]  # each is decoded to its length limit, four times
    gold_path = tmp_path / "valid.gold"
    gold_path.write_text("".join(line[2] + "\n" for line in lines))
    words = [line[0] for line in lines]
    gold = read_gold(gold_path, len(words))
    summaries = {}
    for constrain in (False, True):
        translator = load_translator(checkpoint, DecodeOptions(
            beam=4, lenpen=0.3, max_len_a=4.0, max_len_b=10, constrain_trees=constrain))
        pairs = [(translator.encode(w, i), translator.vocab.encode(line[1]))
                 for i, (w, line) in enumerate(zip(words, lines))]
        score = ValidationScorer(translator.model, translator.vocab, pairs, "f1", gold_path,
                                 constrain_trees=constrain)()

        report = parse_lines(translator, words, gold)
        totals = evalb.score_trees(gold, report.trees, max_errors=len(gold)).all
        assert score.metric == "f1"
        assert score.summary.startswith(f"F1 {totals.f1:.2f} (recall {totals.recall:.2f}")
        assert f"{report.repaired_trees} of {len(gold)} trees repaired" in score.summary
        summaries[constrain] = score.summary
    # The random model writes no brackets of its own (flat trees); constrained, it must.
    assert summaries[False] != summaries[True]


def test_f1_scorer_names_a_gold_file_of_other_sentences(random_parser, tmp_path):
    from vtx.inference.decoding import DecodeOptions
    from vtx.inference.translator import load_translator
    from vtx.parsing.prepare import split_lines

    checkpoint, files = random_parser
    lines, _ = split_lines(files)
    translator = load_translator(checkpoint, DecodeOptions())
    pairs = [(translator.encode(line[0], 0), []) for line in lines]
    short = tmp_path / "short.gold"
    short.write_text("".join(line[2] + "\n" for line in lines[:-1]))
    with pytest.raises(ValueError, match=f"{short} has {len(lines) - 1} trees but the "
                                         f"validation set {len(lines)}"):
        ValidationScorer(translator.model, translator.vocab, pairs, "f1", short)
    shifted = tmp_path / "shifted.gold"
    shifted.write_text("".join(line[2] + "\n" for line in lines[1:] + lines[:1]))
    with pytest.raises(ValueError, match=f"{shifted}, line 1: the gold tree has"):
        ValidationScorer(translator.model, translator.vocab, pairs, "f1", shifted)


class ScriptedScorer:
    """A validation metric that returns the given values in turn (the Trainer's side of the
    contract: when it is asked, what it does with the answer)."""

    def __init__(self, values):
        self.values, self.calls = list(values), 0

    def __call__(self, should_stop=None) -> Score:
        value = self.values[self.calls]
        self.calls += 1
        return Score("bleu", value, f"BLEU = {value}")


VALID = epoch_maker(make_pairs(8, 20, seed=9), 4)(0, 0)


def test_checkpoint_best_follows_the_task_metric_not_the_loss(tmp_path):
    lines = []
    scorer = ScriptedScorer([5.0, 9.0, 7.0, 8.0])
    trainer = make_trainer(tmp_path, lines, max_steps=4, validate_interval_steps=1,
                           best_checkpoint_metric="bleu")
    trainer.fit(epoch_maker(make_pairs(16, 20), 4), lambda: VALID, scorer)
    assert scorer.calls == 4
    assert checkpoints.load(tmp_path / checkpoints.BEST_NAME).meta["step"] == 2
    assert saved_steps(tmp_path) == [1, 2, 4]  # the bests, then the last
    history = [json.loads(line) for line in (tmp_path / "history.jsonl").read_text().splitlines()]
    valid = [row for row in history if "valid_bleu" in row]
    assert [row["valid_bleu"] for row in valid] == [5.0, 9.0, 7.0, 8.0]
    assert [row["minutes"] for row in valid] == pytest.approx([1 / 60, 2 / 60, 3 / 60, 4 / 60])
    assert any("valid step 2 | loss" in line and "| bleu 9.00 | best" in line for line in lines)
    assert (tmp_path / "learning_curve.png").stat().st_size > 0


def test_patience_stops_after_validations_without_a_new_best_and_survives_a_resume(tmp_path):
    lines = []
    trainer = make_trainer(tmp_path, lines, max_steps=4, validate_interval_steps=1,
                           save_interval_steps=1, best_checkpoint_metric="bleu", patience=3)
    assert trainer.fit(epoch_maker(make_pairs(16, 20), 4), lambda: VALID,
                       ScriptedScorer([5.0, 9.0, 7.0, 9.0])) is None  # a tie is no new best
    assert trainer.state.step == 4
    assert not any("--patience" in line for line in lines)  # 2 without a new best, not 3
    # A fresh process resumes the count: one more validation without a new best stops it.
    resumed = make_trainer(tmp_path, lines, max_steps=20, validate_interval_steps=1,
                           save_interval_steps=1, best_checkpoint_metric="bleu", patience=3)
    assert resumed.fit(epoch_maker(make_pairs(16, 20), 4), lambda: VALID,
                       ScriptedScorer([8.5])) is None
    assert resumed.state.step == 5
    assert any("no better bleu in 3 validations (--patience 3) at step 5" in line
               for line in lines)
    assert checkpoints.load(tmp_path / checkpoints.BEST_NAME).meta["step"] == 2
    # The same command again (a requeued job) trained on past the stop, writing checkpoints
    # after the best one; now it says so and trains nothing.
    again = make_trainer(tmp_path, lines, max_steps=20, validate_interval_steps=1,
                         save_interval_steps=1, best_checkpoint_metric="bleu", patience=3)
    scorer = ScriptedScorer([9.5])
    assert again.fit(epoch_maker(make_pairs(16, 20), 4), lambda: VALID, scorer) is None
    assert again.state.step == 5 and scorer.calls == 0 and saved_steps(tmp_path)[-1] == 5
    assert ("nothing to train: the run stopped at step 5 with no better bleu in 3 validations "
            "(--patience 3; raise it to go on)") in lines


class StoppedOnce(ScriptedScorer):
    """As ScriptedScorer, but its `at`-th validation gets SIGTERM while it decodes (as from a
    scheduler) and then asks `should_stop` before its next batch, as ValidationScorer does."""

    def __init__(self, values, at):
        super().__init__(values)
        self.at, self.asked = at, 0

    def __call__(self, should_stop=None) -> Score:
        from vtx.errors import SearchInterrupted

        self.asked += 1
        if self.asked == self.at:
            os.kill(os.getpid(), signal.SIGTERM)  # to fit's handler
            if should_stop():
                raise SearchInterrupted("stopped after 1 batch of the search")
        return super().__call__(should_stop)


@pytest.mark.parametrize("during", ["decoding", "update"])
@pytest.mark.slow
def test_a_stop_signal_before_a_metrics_validation_ends_saves_at_once_and_validates_when_resumed(
        tmp_path, during):
    """BLEU/F1 decoding can outlast a scheduler's grace period: a stop signal received during it
    (it stops between batches) or during the update before it (it does not start) saves the step
    at once, its validation left to the resumed run, which makes it before its first update: the
    run ends as one never stopped (validations, best checkpoint, weights)."""
    pairs, options = make_pairs(16, 20), dict(max_steps=4, validate_interval_steps=1,
                                             best_checkpoint_metric="bleu")
    straight = make_trainer(tmp_path / "straight", **options)
    straight.fit(epoch_maker(pairs, 4), lambda: VALID, ScriptedScorer([5.0, 9.0, 7.0, 8.0]))

    save, lines = tmp_path / "stopped", []
    stopped = make_trainer(save, lines, **options)
    if during == "decoding":
        scorer = StoppedOnce([5.0, 9.0, 7.0, 8.0], at=3)
    else:
        scorer, read = ScriptedScorer([5.0, 9.0, 7.0, 8.0]), stopped.engine.read_update

        def read_update(totals):  # the host waits for the update: the signal comes meanwhile
            if stopped.state.step == 2:
                os.kill(os.getpid(), signal.SIGTERM)
            return read(totals)

        stopped.engine.read_update = read_update
    assert stopped.fit(epoch_maker(pairs, 4), lambda: VALID, scorer) == signal.SIGTERM
    assert stopped.state.step == 3 and scorer.calls == 2
    assert "validation of step 3 interrupted by a stop signal: saving step 3, to be validated " \
           "first when resumed" in lines
    newest = checkpoints.load(checkpoints.list_checkpoints(save)[-1])
    assert newest.meta["step"] == 3 and newest.meta["validation_pending"]
    shutil.copytree(save, tmp_path / "unvalidated")

    resumed = make_trainer(save, lines, **options)
    assert resumed.fit(epoch_maker(pairs, 4), lambda: VALID, ScriptedScorer([7.0, 8.0])) is None
    assert "validating step 3 first: its validation was interrupted by the stop signal that " \
           "ended the last run" in lines
    for run in (tmp_path / "straight", save):
        history = [json.loads(line) for line in (run / "history.jsonl").read_text().splitlines()]
        assert [(row["step"], row["valid_bleu"]) for row in history if "valid_bleu" in row] == [
            (1, 5.0), (2, 9.0), (3, 7.0), (4, 8.0)]
        assert checkpoints.load(run / checkpoints.BEST_NAME).meta["step"] == 2
    # Step 3 saved again once validated: a crash after it would not validate it twice.
    assert not checkpoints.load(checkpoints.checkpoint_path(save, 3)).meta["validation_pending"]
    assert not checkpoints.load(checkpoints.list_checkpoints(save)[-1]).meta["validation_pending"]
    for a, b in zip(resumed.model.variables, straight.model.variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    # Resumed without validations, the step's is dropped, not carried to a later resume.
    unvalidated = make_trainer(tmp_path / "unvalidated", max_steps=4)
    assert unvalidated.fit(epoch_maker(pairs, 4)) is None
    newest = checkpoints.load(checkpoints.list_checkpoints(tmp_path / "unvalidated")[-1])
    assert newest.meta["step"] == 4 and not newest.meta["validation_pending"]


def test_the_scorer_stops_between_decoding_batches_when_asked(trained_checkpoint, shared_data):
    from vtx.errors import SearchInterrupted
    from vtx.inference.decoding import DecodeOptions
    from vtx.inference.translator import load_translator

    translator = load_translator(trained_checkpoint, DecodeOptions())
    with gzip.open(shared_data / "multi30k" / "val.en.gz", "rt") as handle:
        sources = [translator.encode(next(handle).strip(), i) for i in range(12)]
    scorer = ValidationScorer(translator.model, translator.vocab,
                              [(source, source) for source in sources], "bleu", max_tokens=40)
    asked = []

    def should_stop():
        asked.append(len(asked))
        return len(asked) == 2  # after one batch

    with pytest.raises(SearchInterrupted, match="stopped after 1 batches of the search"):
        scorer(should_stop)
    assert len(asked) == 2
    asked.clear()
    assert scorer(lambda: asked.append(0) or False).metric == "bleu"
    assert len(asked) > 2  # one question a batch: 12 sentences in batches of 40 tokens


def test_a_metric_best_checkpoint_without_its_scorer_is_refused(tmp_path):
    from vtx.errors import TrainingError

    trainer = make_trainer(tmp_path, max_steps=2, validate_interval_steps=1,
                           best_checkpoint_metric="f1")
    with pytest.raises(TrainingError, match="chosen by f1, but no validation set or f1 scorer"):
        trainer.fit(epoch_maker(make_pairs(16, 20), 4), lambda: VALID)
    assert not list(tmp_path.iterdir())


def test_vtx_train_eval_bleu_logs_bleu_and_keeps_the_best_by_it(multi30k_small, tmp_path):
    save = tmp_path / "run"
    result = CliRunner().invoke(main, [
        "train", str(multi30k_small / "data"), "--arch", "tiny", "--save-dir", str(save),
        "--max-steps", "4", "--max-tokens", "512", "--validate-interval-steps", "2",
        "--save-interval-minutes", "0", "--eval-bleu", "--eval-beam", "2",
        "--precision", "float32"])
    assert result.exit_code == 0, result.output
    history = [json.loads(line) for line in (save / "history.jsonl").read_text().splitlines()]
    assert [row["step"] for row in history if "valid_bleu" in row] == [2, 4]
    assert "BLEU = " in result.output
    best = checkpoints.load(save / checkpoints.BEST_NAME).meta
    assert best["train_config"]["best_checkpoint_metric"] == "bleu"
    assert best["best_score"] == max(row["valid_bleu"] for row in history if "valid_bleu" in row)


@pytest.mark.parametrize("flags, message", [
    (["--best-checkpoint-metric", "bleu"], "the best checkpoint by bleu needs bleu computed"),
    (["--eval-bleu", "--validate-interval-steps", "0"], "needs a validation split"),
    (["--eval-bleu", "--eval-f1", "GOLD"], "--eval-bleu and --eval-f1 exclude each other"),
    (["--eval-bleu", "--eval-constrain-trees"], "--eval-constrain-trees goes with --eval-f1"),
    (["--patience", "3", "--validate-interval-steps", "0"],
     "--patience 3 counts validations: it needs a validation split in"),
])
def test_vtx_train_refuses_a_metric_it_cannot_compute(multi30k_small, tmp_path, flags, message):
    gold = tmp_path / "valid.gold"
    gold.write_text("(S (NP x))\n")
    save = tmp_path / "run"
    result = CliRunner().invoke(main, [
        "train", str(multi30k_small / "data"), "--arch", "tiny", "--save-dir", str(save),
        "--max-steps", "2", "--max-tokens", "512"] + [str(gold) if f == "GOLD" else f
                                                      for f in flags])
    assert result.exit_code != 0 and message in result.output
    assert not save.exists()


def test_a_best_checkpoint_whose_copy_a_kill_prevented_is_copied_when_resumed(tmp_path):
    """Killed after a new best's numbered checkpoint was written and before its copy into
    checkpoint_best, the resumed run took the best as copied: checkpoint_best held an older step
    for good. Here the kill is stood in for by putting the older copy back."""
    import shutil

    lines = []
    trainer = make_trainer(tmp_path, lines, max_steps=2, validate_interval_steps=1,
                           save_interval_steps=1, best_checkpoint_metric="bleu")
    trainer.fit(epoch_maker(make_pairs(16, 20), 4), lambda: VALID, ScriptedScorer([5.0, 9.0]))
    best = tmp_path / checkpoints.BEST_NAME
    assert checkpoints.load(best).meta["step"] == 2
    shutil.copy(checkpoints.checkpoint_path(tmp_path, 1), best)  # as left by the kill
    resumed = make_trainer(tmp_path, lines, max_steps=2, validate_interval_steps=1,
                           save_interval_steps=1, best_checkpoint_metric="bleu")
    assert resumed.fit(epoch_maker(make_pairs(16, 20), 4), lambda: VALID,
                       ScriptedScorer([])) is None
    assert checkpoints.load(best).meta["step"] == 2
    assert (f"{best} now holds step 2, the best (the run that saved it was stopped before "
            f"copying it; it held step 1)") in lines
    # Not when the newest checkpoint is not the best: step 3 validates worse than step 2.
    again = make_trainer(tmp_path, lines, max_steps=3, validate_interval_steps=1,
                         save_interval_steps=1, best_checkpoint_metric="bleu")
    again.fit(epoch_maker(make_pairs(16, 20), 4), lambda: VALID, ScriptedScorer([1.0]))
    lines.clear()
    make_trainer(tmp_path, lines, max_steps=3, validate_interval_steps=1, save_interval_steps=1,
                 best_checkpoint_metric="bleu").fit(epoch_maker(make_pairs(16, 20), 4),
                                                    lambda: VALID, ScriptedScorer([]))
    assert checkpoints.load(best).meta["step"] == 2 and not any("now holds" in l for l in lines)
