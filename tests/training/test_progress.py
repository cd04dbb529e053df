import json

from vtx.training.progress import Progress, format_perplexity


def test_progress_line_has_the_figures_and_history_is_recorded(tmp_path):
    lines = []
    progress = Progress(tmp_path, max_steps=100, log=lines.append)
    progress.add(loss_sum=200.0, nll_sum=150.0, tokens=100.0)
    progress.report_train(step=10, learning_rate=1e-3, skipped=0)
    assert lines[0].startswith("step 10/100 | loss 2.000 | nll 1.500 | ppl 4.48 | lr 1.000e-03")
    assert "tok/s" in lines[0] and "eta" in lines[0]
    record = json.loads((tmp_path / "history.jsonl").read_text())
    assert record["step"] == 10 and record["train_loss"] == 2.0


def test_eta_never_exceeds_the_time_budget(tmp_path):
    lines, now = [], [0.0]
    progress = Progress(tmp_path, max_steps=1_000_000, log=lines.append, time_budget_seconds=120,
                        clock=lambda: now[0])
    for step, seconds in ((1, 10.0), (2, 100.0)):
        now[0] = seconds
        progress.add(1.0, 1.0, 1.0)
        progress.report_train(step=step, learning_rate=1e-3, skipped=0)
    assert [line.split("eta ")[1].split(" ")[0] for line in lines] == ["0:01:50", "0:00:20"]


def test_progress_line_gives_tokens_per_second_and_eta_from_the_clock(tmp_path):
    lines, now = [], [50.0]
    progress = Progress(tmp_path, max_steps=30, log=lines.append, clock=lambda: now[0])
    now[0] = 60.0  # 10 updates of 400 target tokens in 10 seconds
    progress.add(loss_sum=800.0, nll_sum=600.0, tokens=4000.0)
    progress.report_train(step=10, learning_rate=1e-3, skipped=2)
    assert lines[0].endswith("| tok/s 400 | elapsed 0:00:10 | eta 0:00:20 | skipped 2")


def test_learning_curve_png_is_written(tmp_path):
    progress = Progress(tmp_path, max_steps=10, log=lambda line: None)
    for step in (1, 2):
        progress.add(3.0 - step, 2.0, 1.0)
        progress.report_train(step, 1e-3, 0)
    progress.report_valid(2, 1.5, 1.2, best=True)
    progress.plot()
    assert (tmp_path / "learning_curve.png").read_bytes()[:4] == b"\x89PNG"
    assert not list(tmp_path.glob(".*tmp*"))


def test_perplexity_is_readable_however_large():
    assert [format_perplexity(nll) for nll in (1.5, 13.0, 20.0, 50.0, 51.0, 1e4)] == [
        "4.48", "442413.39", "4.85e+08", "5.18e+21", ">5.18e+21", ">5.18e+21"]
    assert format_perplexity(float("nan")) == "nan"


def test_an_untrained_models_perplexity_is_not_22_digits_long(tmp_path):
    lines = []
    progress = Progress(tmp_path, max_steps=100, log=lines.append)
    progress.report_valid(step=10, loss=80.0, nll=80.0, best=False)
    assert lines[0] == "valid step 10 | loss 80.000 | nll 80.000 | ppl >5.18e+21"


def test_history_rows_that_are_not_vtx_s_are_dropped_and_said_when_resumed(tmp_path):
    """A row of history.jsonl with a step that is not an integer (edited) was a TypeError at
    the resume; it is dropped, said with its line, and the learning curve is drawn from the
    rows that are vtx's."""
    rows = [{"step": 1, "train_loss": 2.0}, {"step": "x"}, [3], {"step": 2, "valid_loss": 1.5},
            {"step": 5, "train_loss": 1.0}]
    (tmp_path / "history.jsonl").write_text(
        "".join(json.dumps(row) + "\n" for row in rows) + '{"step": 6, "tra')
    lines = []
    progress = Progress(tmp_path, max_steps=10, log=lines.append, start_step=2)
    assert lines == [  # the last row, cut short by a kill, is one of those after the step
        "history.jsonl: 2 rows after step 2 dropped (written after the checkpoint this run "
        "resumes from)",
        f"{tmp_path / 'history.jsonl'}: 2 rows that are not a JSON object with an integer step, "
        f"dropped (line 2, 3: edited, or not vtx's)"]
    assert [json.loads(line) for line in (tmp_path / "history.jsonl").read_text().splitlines()] \
        == [rows[0], rows[3]]
    progress.plot()
    assert (tmp_path / "learning_curve.png").read_bytes()[:4] == b"\x89PNG"
