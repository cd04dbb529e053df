"""The comparison plots of docs/benchmarks.md and docs/results.md, from benchmarks/results/*.csv.

    .venv/bin/python benchmarks/plot.py [--results benchmarks/results] [--out docs/img]

Each CSV holds one benchmark's figures as the docs give them, one row per measured run, with the
machine and the command (and commit and date) that produced it. A new measurement is a new row;
rerunning this redraws the PNGs. Only the csv module and matplotlib (Agg backend): no TensorFlow.
"""

from __future__ import annotations

import argparse
import csv
from collections.abc import Callable
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend is chosen first)

ROOT = Path(__file__).resolve().parents[1]

VTX_COLOR, REFERENCE_COLOR = "#1f77b4", "#bbbbbb"


def read_rows(path: Path) -> list[dict[str, str]]:
    """The rows of one results CSV as dictionaries keyed by its header."""
    with path.open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def _paired_bars(
    ax,
    labels: list[str],
    ours: list[float],
    theirs: list[float],
    names: tuple[str, str],
    legend: str = "lower right",
):
    """Horizontal bar pairs, vtx above its reference, the ratio written at the end of each pair."""
    rows = range(len(labels))
    height = 0.38
    ax.barh([row - height / 2 for row in rows], ours, height, label=names[0], color=VTX_COLOR)
    ax.barh([row + height / 2 for row in rows], theirs, height, label=names[1],
            color=REFERENCE_COLOR)
    for row, mine, other in zip(rows, ours, theirs):
        ax.text(max(mine, other) * 1.01, row, f"{mine / other:.2f}x", va="center", fontsize=9)
    ax.set_yticks(list(rows), labels)
    ax.invert_yaxis()
    ax.set_xlim(0, max(ours + theirs) * 1.15)
    ax.legend(loc=legend, fontsize=9)
    ax.grid(axis="x", alpha=0.3)


def _save(fig, out: Path) -> None:
    """Write the figure as a PNG and free it."""
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def plot_quickstart(rows: list[dict[str, str]], out: Path) -> None:
    """Quick start: median target tok/s per CPU kind, with its BLEU and the script's minutes."""
    fig, ax = plt.subplots(figsize=(10, 3.8))
    labels = [f"{row['cpu']}\n{row['precision']}" for row in rows]
    rates = [float(row["median_tok_s"]) for row in rows]
    ax.barh(range(len(rows)), rates, color=VTX_COLOR)
    for index, row in enumerate(rows):
        stop = "stopped by patience" if row["stop"] == "patience" else f"all {row['stop']}"
        note = (
            f"BLEU {row['bleu']}, {int(row['updates']):,} updates ({stop}),\n"
            f"whole script {int(row['script_s']):,} s"
        )
        ax.text(rates[index] + 60, index, note, va="center", fontsize=9)
    ax.set_yticks(range(len(rows)), labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, max(rates) * 1.85)
    ax.set_xlabel("median target tokens/s over 50-update intervals (2 cores)")
    ax.set_title("Quick start (Multi30k EN→DE): speed and test_2016 BLEU per CPU", fontsize=11)
    ax.grid(axis="x", alpha=0.3)
    _save(fig, out)


def plot_train_vs_torch(rows: list[dict[str, str]], out: Path) -> None:
    """vtx against the PyTorch reference, quick start model, each CPU's own instructions.

    One line per machine and precision; each run is a dot (vtx blue, the reference grey), and the
    line ends with the range of vtx / reference over the runs.
    """
    rows = [row for row in rows if row["instructions"] == "own"]
    groups = list(dict.fromkeys((row["machine"], row["precision"]) for row in rows))
    fig, ax = plt.subplots(figsize=(9, 0.5 * len(groups) + 1.3))
    for line, (machine, precision) in enumerate(groups):
        runs = [row for row in rows if (row["machine"], row["precision"]) == (machine, precision)]
        ours = [float(row["vtx_tok_s"]) for row in runs]
        theirs = [float(row["ref_tok_s"]) for row in runs]
        ax.plot([min(theirs), max(ours)], [line, line], color="#dddddd", zorder=1)
        ax.scatter(theirs, [line] * len(runs), color=REFERENCE_COLOR, edgecolor="#666666", zorder=2,
                   label="torch reference" if line == 0 else None)
        ax.scatter(ours, [line] * len(runs), color=VTX_COLOR, zorder=3,
                   label="vtx" if line == 0 else None)
        ratios = sorted(mine / other for mine, other in zip(ours, theirs))
        low, high = f"{ratios[0]:.2f}", f"{ratios[-1]:.2f}"
        spread = f"{low}x" if low == high else f"{low}-{high}x"
        ax.text(max(ours) + 120, line, f"{spread} ({len(runs)} run{'s' if len(runs) > 1 else ''})",
                va="center", fontsize=9)
    names = [f"{machine}\n{precision}" for machine, precision in groups]
    ax.set_yticks(range(len(groups)), names, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, max(float(row["vtx_tok_s"]) for row in rows) * 1.3)
    ax.set_xlabel("target tokens/s of one update (synthetic 64 x 32 batches, 2 cores)")
    ax.set_title("Training on a CPU: vtx vs the PyTorch reference, quick start model", fontsize=11)
    ax.legend(loc="lower right", fontsize=9)
    ax.grid(axis="x", alpha=0.3)
    _save(fig, out)


def plot_gpu_train(rows: list[dict[str, str]], out: Path) -> None:
    """vtx against the PyTorch reference on a GPU, bfloat16, per model and batch (the rows that
    timed the reference)."""
    rows = [row for row in rows if row["torch_tok_s"]]
    fig, ax = plt.subplots(figsize=(8, 2.8))
    labels = [
        f"{row['model']}, {int(row['target_tokens']):,} tokens\nMFU {row['vtx_mfu_pct']}%"
        for row in rows
    ]
    _paired_bars(
        ax,
        labels,
        [float(row["vtx_tok_s"]) for row in rows],
        [float(row["torch_tok_s"]) for row in rows],
        ("vtx (XLA)", "torch reference"),
        legend="upper right",
    )
    ax.set_xlabel("target tokens/s, bfloat16")
    ax.set_title(f"GPU training: vtx vs the PyTorch reference, {rows[0]['gpu']}", fontsize=11)
    _save(fig, out)



def _checkpoint(command: str) -> str:
    """The checkpoint a translate_speed.py command names (its --checkpoint's file name), else
    the script's default, the tests' tiny model."""
    words = command.split()
    if "--checkpoint" in words[:-1]:
        return Path(words[words.index("--checkpoint") + 1]).name
    return "tiny model"

def plot_decoding(rows: list[dict[str, str]], out: Path) -> None:
    """vtx translate against CTranslate2 on the same weights: target tokens/s per run, against
    CTranslate2's fastest setting of the run (translate_speed.py writes a row per setting)."""
    runs: dict[tuple[str, ...], dict[str, str]] = {}
    for row in rows:
        run = (row["machine"], row["commit"], row["date"], row["command"])
        if run not in runs or float(row["ct2_s"]) < float(runs[run]["ct2_s"]):
            runs[run] = row
    rows = list(runs.values())
    machines = list(dict.fromkeys(f"{row['machine']} ({row['device']})" for row in rows))
    # One machine is named in the title, several each in its rows' labels.
    where = (lambda row: "") if len(machines) == 1 else (
        lambda row: f"{row['machine']} ({row['device']})\n")
    fig, ax = plt.subplots(figsize=(8, 0.8 * len(rows) + 1.6))
    threads = lambda row: f"{row['threads']} thread{'s' if row['threads'] != '1' else ''}"
    vtx_setting = lambda row: " ".join(
        [row["precision"]] + (["int8"] if row["vtx_quantize"] == "int8" else []) +
        [f"{row['vtx_max_tokens']} tokens"] +
        ([f"x{row['vtx_search_threads']} searches"] if row["vtx_search_threads"] != "1" else []))
    ct2_threads = lambda row: (f", inter_threads {row['ct2_inter_threads']}"
                               if row["ct2_inter_threads"] != "1" else "")
    labels = [
        f"{where(row)}{_checkpoint(row['command'])}, {row['input']}, {threads(row)}\n"
        f"vtx {vtx_setting(row)}, --stop {row['stop']}, "
        f"{row['identical_lines']}/{row['lines']} lines identical\n"
        f"CTranslate2 {row['compute_type']}, {row['max_batch_size']} {row['batch_type']}"
        f"{ct2_threads(row)}"
        for row in rows
    ]
    _paired_bars(
        ax,
        labels,
        [float(row["vtx_tok_s"]) for row in rows],
        [float(row["ct2_tok_s"]) for row in rows],
        ("vtx", "CTranslate2, its fastest setting"),
    )
    ax.tick_params(axis="y", labelsize=8)
    ax.set_xlabel("target tokens/s of the steady call")
    title = "Decoding: vtx vs CTranslate2" + (f", {machines[0]}" if len(machines) == 1 else "")
    ax.set_title(title, fontsize=11)
    _save(fig, out)


def plot_wsj_curve(rows: list[dict[str, str]], out: Path) -> None:
    """WSJ sample parser: dev and test F1 (beam 4) of each checkpoint against training minutes,
    one colour per run (its name and machine): dev (the set the checkpoint is chosen on) solid,
    test dashed (a row without a test figure, such as a self-training teacher's, has its dev
    point alone)."""
    fig, ax = plt.subplots(figsize=(7.5, 5))
    for run, machine in dict.fromkeys((row["run"], row["machine"]) for row in rows):
        points = [row for row in rows if (row["run"], row["machine"]) == (run, machine)]
        (line,) = ax.plot([float(point["minutes"]) for point in points],
                          [float(point["dev_f1_beam4"]) for point in points], "o-",
                          label=f"{run}, {machine}: dev", markersize=4)
        tested = [point for point in points if point.get("test_f1_beam4")]
        ax.plot([float(point["minutes"]) for point in tested],
                [float(point["test_f1_beam4"]) for point in tested], "s--",
                color=line.get_color(), label="test", markersize=4)
    ax.set_xlabel("training minutes (2 cores)")
    ax.set_ylabel("F1, beam 4, constrained (EMA weights)")
    ax.set_title("WSJ sample parser (small.sh): dev and test F1 along the run", fontsize=11)
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(alpha=0.3)
    _save(fig, out)


def plot_serve_load(rows: list[dict[str, str]], out: Path) -> None:
    """`vtx serve` under load, the newest run per number of clients: lines/s served against
    the same lines translated offline, and the requests' latency percentiles."""
    newest = {int(row["clients"]): row for row in rows}  # later rows replace earlier ones
    clients = sorted(newest)
    labels = [f"{count} client{'s' if count > 1 else ''}" for count in clients]
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.4))
    _paired_bars(left, labels, [float(newest[c]["lines_per_s"]) for c in clients],
                 [float(newest[c]["offline_lines_per_s"]) for c in clients],
                 ("vtx serve", "offline (vtx translate)"))
    left.legend(loc="upper center", bbox_to_anchor=(0.5, -0.28), ncol=2, fontsize=9)
    left.set_xlabel("lines/s")
    height = 0.25
    for offset, (name, color) in enumerate((("p50", VTX_COLOR), ("p95", "#6baed6"),
                                            ("p99", REFERENCE_COLOR))):
        right.barh([row + (offset - 1) * height for row in range(len(clients))],
                   [float(newest[c][f"{name}_s"]) for c in clients], height, label=name,
                   color=color)
    right.set_yticks(list(range(len(clients))), labels)
    right.invert_yaxis()
    right.set_xlabel("request latency, s (1-5 lines a request)")
    right.legend(loc="upper center", bbox_to_anchor=(0.5, -0.28), ncol=3, fontsize=9)
    right.grid(axis="x", alpha=0.3)
    machine = newest[clients[-1]]["machine"].split(";")[0]
    fig.suptitle(f"vtx serve under load, {newest[clients[-1]]['checkpoint']}, {machine}",
                 fontsize=10)
    _save(fig, out)


def plot_serve_abuse(rows: list[dict[str, str]], out: Path) -> None:
    """`vtx serve` beside hostile clients, the newest run: the honest clients' lines/s and
    p50/p99 latency, beside hostile clients against alone, and /health's worst latency."""
    row = rows[-1]
    fig, (left, middle, right) = plt.subplots(1, 3, figsize=(10, 3.0))
    _paired_bars(left, ["lines/s"], [float(row["abused_lines_per_s"])],
                 [float(row["clean_lines_per_s"])], ("beside hostile", "alone"))
    left.set_xlabel("honest lines/s")
    _paired_bars(middle, ["p50", "p99"], [float(row["abused_p50_s"]), float(row["abused_p99_s"])],
                 [float(row["clean_p50_s"]), float(row["clean_p99_s"])],
                 ("beside hostile", "alone"))
    middle.set_xlabel("honest request latency, s")
    _paired_bars(right, ["/health"], [float(row["abused_health_worst_ms"])],
                 [float(row["clean_health_worst_ms"])], ("beside hostile", "alone"))
    right.axvline(100, color="grey", linestyle="--", linewidth=1)
    right.set_xlabel("worst /health latency, ms (target < 100)")
    for ax in (middle, right):  # one legend, beside the left's bars
        ax.get_legend().remove()
    left.set_xlim(0, 2.1 * max(float(row["abused_lines_per_s"]), float(row["clean_lines_per_s"])))
    left.legend(loc="upper right", fontsize=8)
    fig.suptitle(f"vtx serve: {row['clients']} honest clients beside {row['hostile']} hostile "
                 f"ones, {row['checkpoint']}, {row['machine'].split(';')[0]}", fontsize=10)
    _save(fig, out)


# CSV name -> (the columns its plot reads, the plot, the PNG it writes)
PLOTS: dict[str, tuple[tuple[str, ...], Callable[[list[dict[str, str]], Path], None], str]] = {
    "quickstart.csv": (
        ("cpu", "precision", "bleu", "updates", "stop", "median_tok_s", "script_s", "command"),
        plot_quickstart,
        "quickstart_by_cpu.png",
    ),
    "train_vs_torch.csv": (
        ("machine", "instructions", "precision", "commit", "vtx_tok_s", "ref_tok_s", "command"),
        plot_train_vs_torch,
        "train_vs_torch.png",
    ),
    "gpu_train.csv": (
        ("gpu", "model", "target_tokens", "vtx_tok_s", "vtx_mfu_pct", "date", "command"),
        plot_gpu_train,
        "gpu_vs_torch.png",
    ),
    "decoding_vs_ct2.csv": (
        ("machine", "device", "input", "lines", "threads", "stop", "precision", "vtx_tok_s",
         "compute_type", "batch_type", "max_batch_size", "ct2_s", "ct2_tok_s", "identical_lines",
         "commit", "date", "command", "vtx_quantize", "vtx_max_tokens"),
        plot_decoding,
        "decoding_vs_ct2.png",
    ),
    "serve_load.csv": (
        ("machine", "checkpoint", "clients", "lines_per_s", "offline_lines_per_s", "p50_s",
         "p95_s", "p99_s", "command"),
        plot_serve_load,
        "serve_load.png",
    ),
    "serve_abuse.csv": (
        ("machine", "checkpoint", "clients", "hostile", "clean_lines_per_s",
         "abused_lines_per_s", "clean_p50_s", "clean_p99_s", "abused_p50_s", "abused_p99_s",
         "clean_health_worst_ms", "abused_health_worst_ms", "command"),
        plot_serve_abuse,
        "serve_abuse.png",
    ),
    "wsj_f1_curve.csv": (
        ("run", "machine", "minutes", "dev_f1_beam4", "command"),
        plot_wsj_curve,
        "wsj_f1_by_minutes.png",
    ),
}


def main(argv: list[str] | None = None) -> list[Path]:
    """Draw every plot of PLOTS; returns the PNGs written."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=ROOT / "benchmarks" / "results")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "img")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, (columns, plot, png) in PLOTS.items():
        rows = read_rows(args.results / name)
        missing = [column for column in columns if any(not row.get(column) for row in rows)]
        if missing:
            raise SystemExit(f"{name}: rows without {', '.join(missing)}")
        plot(rows, args.out / png)
        written.append(args.out / png)
        print(args.out / png)
    return written


if __name__ == "__main__":
    main()
