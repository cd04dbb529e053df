"""Progress of a training run: one line per interval, TensorBoard scalars, a learning-curve PNG."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Callable

from vtx import atomic
from vtx.progress_lines import format_duration


PERPLEXITY_CAP = 50.0  # nats per token: exp(50) ~ 5.18e+21 is shown as above it


def format_perplexity(nll: float) -> str:
    """exp(nll), nll in nats per token: two decimals up to 10^6, then 3 significant digits
    ("1.23e+07"); past exp(50) (an untrained or diverged model's, where exp would overflow
    past ~709) ">5.18e+21" instead of the 22-digit number."""
    if nll > PERPLEXITY_CAP:
        return f">{math.exp(PERPLEXITY_CAP):.3g}"
    perplexity = math.exp(nll)  # nan stays nan
    return f"{perplexity:.2f}" if perplexity < 1e6 else f"{perplexity:.3g}"


class Progress:
    """Accumulates training figures between reports and writes them out.

    Args:
        save_dir: where `history.jsonl` and `learning_curve.png` go.
        max_steps: for the ETA.
        start_step: the step this process starts from (a resumed run's), for the ETA.
        time_budget_seconds: a wall-time budget (`--max-minutes`); the ETA never exceeds what is
            left of it.
        log: where lines go (e.g. `print` to stderr).
        tensorboard_dir: optional TensorBoard log directory.
        clock: seconds from an arbitrary origin (tests pass a fake one).
        elapsed_before: wall seconds of the earlier runs this one resumes (for the training
            minutes recorded with each validation).
        history: whether `record` appends to `history.jsonl` (the chief's alone: workers may
            share the save dir, and each row is to be written once).
    """

    def __init__(self, save_dir: Path, max_steps: int, log: Callable[[str], None],
                 tensorboard_dir: str | None = None, time_budget_seconds: float | None = None,
                 clock: Callable[[], float] = time.monotonic, start_step: int = 0,
                 elapsed_before: float = 0.0, history: bool = True):
        self.save_dir, self.max_steps, self.log = Path(save_dir), max_steps, log
        self.history = history
        self.clock = clock
        self.time_budget_seconds = time_budget_seconds
        self.history_path = self.save_dir / "history.jsonl"
        self._writer = None
        if tensorboard_dir:
            import tensorflow as tf

            self._writer = tf.summary.create_file_writer(str(tensorboard_dir))
        self._run_start = clock()
        self._reset(self._run_start)
        self._start_step = start_step
        self._elapsed_before = elapsed_before
        if history:
            self._trim_history(start_step)

    def _trim_history(self, step: int) -> None:
        """Drop the rows of history.jsonl past `step`, the step this run resumes from: a run
        killed between checkpoints had written them, and its resumed run wrote them again (a
        learning curve going back in steps); also a row cut short by the kill."""
        if not self.history_path.exists():
            return
        lines = self.history_path.read_text(errors="replace").splitlines()
        kept, later, unreadable = [], 0, []
        for number, line in enumerate(lines, 1):
            row = _history_row(line)
            if row is None and number == len(lines) and not _parses(line):
                later += 1  # the last row, cut short by the kill that ended the run
            elif row is None:
                unreadable.append(number)
            elif row["step"] > step:
                later += 1
            else:
                kept.append(line)
        if len(kept) < len(lines):
            atomic.write_text(self.history_path, "".join(line + "\n" for line in kept))
        if later:
            self.log(f"history.jsonl: {later} rows after step {step} dropped (written after the "
                     f"checkpoint this run resumes from)")
        if unreadable:
            shown = ", ".join(map(str, unreadable[:5])) + (", ..." if len(unreadable) > 5 else "")
            rows = "1 row that is" if len(unreadable) == 1 else f"{len(unreadable)} rows that are"
            self.log(f"{self.history_path}: {rows} not a JSON object with an integer step, "
                     f"dropped (line {shown}: edited, or not vtx's)")

    def _reset(self, now: float) -> None:
        self._loss = self._nll = self._tokens = 0.0
        self._interval_start = now

    def add(self, loss_sum: float, nll_sum: float, tokens: float) -> None:
        self._loss += loss_sum
        self._nll += nll_sum
        self._tokens += tokens

    def leave_out(self, seconds: float) -> None:
        """Leave `seconds` (validating, saving) out of this interval's tokens/s."""
        self._interval_start += seconds

    def report_train(self, step: int, learning_rate: float, skipped: int,
                     diverged: int = 0) -> None:
        now = self.clock()
        tokens = max(self._tokens, 1.0)
        loss, nll = self._loss / tokens, self._nll / tokens
        rate = self._tokens / max(now - self._interval_start, 1e-9)
        done = step - self._start_step
        eta = (now - self._run_start) / max(done, 1) * (self.max_steps - step)
        if self.time_budget_seconds:
            eta = min(eta, self.time_budget_seconds - (now - self._run_start))
        self.log(f"step {step}/{self.max_steps} | loss {loss:.3f} | nll {nll:.3f} | "
                 f"ppl {format_perplexity(nll)} | lr {learning_rate:.3e} | tok/s {rate:.0f} | "
                 f"elapsed {format_duration(now - self._run_start)} | eta {format_duration(eta)}"
                 + (f" | skipped {skipped}" if skipped else "")
                 + (f" | diverged {diverged}" if diverged else ""))
        self.record(step, {"train_loss": loss, "train_nll": nll, "lr": learning_rate,
                           "tokens_per_second": rate})
        self._reset(now)

    def report_valid(self, step: int, loss: float, nll: float, best: bool,
                     score=None) -> None:
        """One validation: loss, and the task metric when `score` (a validation.Score) is given."""
        minutes = (self._elapsed_before + self.clock() - self._run_start) / 60
        metric = f" | {score.metric} {score.value:.2f}" if score is not None else ""
        self.log(f"valid step {step} | loss {loss:.3f} | nll {nll:.3f} | "
                 f"ppl {format_perplexity(nll)}{metric}" + (" | best" if best else ""))
        values = {"valid_loss": loss, "valid_nll": nll, "minutes": minutes}
        if score is not None:
            self.log(f"valid step {step} | {score.summary}")
            values[f"valid_{score.metric}"] = score.value
        self.record(step, values)

    def record(self, step: int, values: dict) -> None:
        if self.history:
            with open(self.history_path, "a") as handle:
                handle.write(json.dumps({"step": step, **values}) + "\n")
        if self._writer is not None:
            import tensorflow as tf

            with self._writer.as_default():
                for name, value in values.items():
                    tf.summary.scalar(name, value, step=step)
            self._writer.flush()

    def plot(self) -> None:
        """Write learning_curve.png (train and valid loss per step) atomically."""
        write_learning_curve(self.history_path, self.save_dir / "learning_curve.png")


def _parses(line: str) -> bool:
    try:
        json.loads(line)
    except ValueError:
        return False
    return True


def _history_row(line: str) -> dict | None:
    """A row of history.jsonl: a JSON object with an integer step whose other values are
    numbers (None for anything else: a row cut short by a kill, or edited), those values kept."""
    try:
        row = json.loads(line)
    except ValueError:
        return None
    if not isinstance(row, dict) or type(row.get("step")) is not int:
        return None
    return {key: value for key, value in row.items()
            if isinstance(value, (int, float)) and not isinstance(value, bool)}


def write_learning_curve(history_path: Path, png_path: Path) -> None:
    """Plot train/valid loss per step from a history.jsonl file into a PNG (temp file, then
    rename); with a task metric (valid_bleu, valid_f1) a second panel plots it against the
    training minutes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [row for line in Path(history_path).read_text(errors="replace").splitlines()
            if (row := _history_row(line)) is not None]
    metrics = [(key, label) for key, label in (("valid_bleu", "BLEU"), ("valid_f1", "F1"))
               if any(key in r for r in rows)]
    if metrics:
        figure, (axis, metric_axis) = plt.subplots(1, 2, figsize=(12, 4))
        for key, label in metrics:
            points = [(r["minutes"], r[key]) for r in rows if key in r and "minutes" in r]
            metric_axis.plot(*zip(*points), marker=".", label=f"validation {label}")
        metric_axis.set_xlabel("training minutes (wall, validations included)")
        metric_axis.set_ylabel(" / ".join(label for _, label in metrics))
        metric_axis.grid(alpha=0.3)
        metric_axis.legend()
    else:
        figure, axis = plt.subplots(figsize=(7, 4))
    for key, label in (("train_loss", "train"), ("valid_loss", "valid")):
        points = [(r["step"], r[key]) for r in rows if key in r]
        if points:
            axis.plot(*zip(*points), marker="." if key == "valid_loss" else None, label=label)
    axis.set_xlabel("step")
    axis.set_ylabel("label-smoothed loss (nats/token)")
    axis.grid(alpha=0.3)
    axis.legend()
    with atomic.replaced_on_success(png_path) as tmp:
        figure.savefig(tmp, dpi=100, bbox_inches="tight")
    plt.close(figure)
