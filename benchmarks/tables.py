"""The tables of figures of docs/benchmarks.md and docs/results.md, from benchmarks/results/*.csv.

    .venv/bin/python benchmarks/tables.py --write   # rewrite the tables of the pages in place
    .venv/bin/python benchmarks/tables.py --check   # exit 1 naming each table that differs

A page marks each table with two comments: `<!-- table: NAME COLUMN=VALUE ... -->` above it and
`<!-- /table -->` below. NAME is an entry of TABLES (its CSV and how it lays the rows out); each
COLUMN=VALUE keeps the CSV's rows whose COLUMN holds VALUE, COLUMN!=VALUE the others,
COLUMN~TEXT those whose COLUMN contains TEXT (quoted where it holds spaces:
`command~"--steps-base 30"`) and COLUMN!~TEXT those whose COLUMN does not. What lies between the two comments is this script's output: a
figure lives in its CSV row, and a page only shows it. Each table ends with its rows' machine,
commit and command, those of them its CSV has (a column where the rows differ).
No TensorFlow: the rows are read by benchmarks/plot.py's `read_rows`.
"""

from __future__ import annotations

import argparse
import re
import shlex
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from plot import read_rows  # noqa: E402  (the rows are read one way, plot.py's)

ROOT = Path(__file__).resolve().parents[1]
PAGES = (ROOT / "docs" / "benchmarks.md", ROOT / "docs" / "results.md")
RESULTS = ROOT / "benchmarks" / "results"

# <!-- table: NAME selectors -->, the table, <!-- /table -->; `body` is what the script writes.
BLOCK = re.compile(r"(<!-- table: (?P<spec>[^\n]*?) -->\n)(?P<body>.*?)(<!-- /table -->)", re.S)
SELECTOR = re.compile(r"(?P<column>\w+)(?P<op>!=|!~|=|~)(?P<value>.+)", re.S)

Row = dict[str, str]
Lines = list[str]


def select(rows: list[Row], selectors: list[str]) -> list[Row]:
    """The rows that every COLUMN=VALUE (equal), COLUMN!=VALUE, COLUMN~TEXT (contains) or
    COLUMN!~TEXT (does not contain) selector keeps.

    Raises:
        ValueError: a selector of another form, or one that names no column.
    """
    for selector in selectors:
        match = SELECTOR.fullmatch(selector)
        if not match:
            raise ValueError(f"selector {selector!r}: not COLUMN=VALUE, COLUMN!=VALUE, "
                             "COLUMN~TEXT or COLUMN!~TEXT")
        column, op, value = match["column"], match["op"], match["value"]
        if rows and column not in rows[0]:
            raise ValueError(f"selector {selector!r}: no column {column}")
        keep = {"=": lambda cell: cell == value, "!=": lambda cell: cell != value,
                "~": lambda cell: value in cell, "!~": lambda cell: value not in cell}[op]
        rows = [row for row in rows if keep(row[column])]
    return rows


def number(text: str, digits: int = 0) -> str:
    """A figure as the pages write it: thousands separated, `digits` decimals."""
    return f"{float(text):,.{digits}f}"


def ratio(mine: str, other: str) -> str:
    """mine / other as `1.23x`."""
    return f"{float(mine) / float(other):.2f}x"


def table(header: list[str], rows: list[list[str]]) -> Lines:
    """A Markdown table."""
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *("| " + " | ".join(cells) + " |" for cells in rows)]


def groups(rows: list[Row], keys: tuple[str, ...]) -> list[list[Row]]:
    """The rows grouped by the values of `keys`, in the CSV's order of first appearance."""
    grouped: dict[tuple[str, ...], list[Row]] = {}
    for row in rows:
        grouped.setdefault(tuple(row.get(key, "") for key in keys), []).append(row)
    return list(grouped.values())


def with_provenance(header: list[str], body: list[tuple[list[Row], list[str]]],
                    keys: tuple[str, ...]) -> Lines:
    """The table, each row followed by the provenance columns (`keys`) that differ between its
    rows, then a bullet naming the ones they share. Commands that differ are written once in
    the bullet, their common words with `…` for each row's own, which its cell holds.

    Args:
        header: the figures' column names.
        body: each table row as (the CSV rows it shows, its cells).
        keys: the provenance columns of the CSV, such as machine, commit and command.
    """
    everything = [row for rows, _ in body for row in rows]
    varying = [key for key in keys if len({row[key] for row in everything}) > 1]
    shared = [f"{key}: {code(everything[0][key], key)}" for key in keys if key not in varying]
    head, tail = common_words([row["command"] for row in everything]) if "command" in varying \
        else (0, 0)
    if head or tail:
        words = everything[0]["command"].split()
        shared.append("command: " + code(" ".join([*words[:head], "…",
                                                   *words[len(words) - tail:]]), "command"))

    def cell(rows: list[Row], key: str) -> str:
        values = dict.fromkeys(row[key] for row in rows)
        if key == "command":
            values = dict.fromkeys(" ".join(value.split()[head:len(value.split()) - tail])
                                   for value in values)
            if values.keys() == {""}:
                return "-"  # the row's command is the common words alone
        return code("; ".join(values), key)

    cells = [[*figures, *(cell(rows, key) for key in varying)] for rows, figures in body]
    lines = table([*header, *varying], cells)
    if shared and everything:
        lines += ["", "- " + "; ".join(shared)]
    return lines


def common_words(commands: list[str]) -> tuple[int, int]:
    """How many words every command starts with alike, and how many it ends with alike after
    them."""
    split = [command.split() for command in commands]
    shortest = min(len(words) for words in split)
    head = 0
    while head < shortest and len({words[head] for words in split}) == 1:
        head += 1
    tail = 0
    while tail < shortest - head and len({words[-1 - tail] for words in split}) == 1:
        tail += 1
    return head, tail


def code(text: str, key: str) -> str:
    """A command in backticks (its `|` escaped for the table), another value as it is."""
    return f"`{text}`".replace("|", r"\|") if key == "command" else text


def steps(command: str) -> str:
    """The timed updates of a train_throughput.py command (its --steps-base)."""
    words = command.split()
    return words[words.index("--steps-base") + 1] if "--steps-base" in words else "-"


def quickstart(rows: list[Row]) -> Lines:
    """quickstart.csv: BLEU, updates and speed of `recipes/quickstart.sh`, a row per CPU."""
    body = [([row], [row["cpu"], row["precision"], f"**{row['bleu']}**",
                     f"{number(row['updates'])} ({row['stop']})", number(row["median_tok_s"]),
                     f"{float(row['script_s']) / 60:.0f} min"]) for row in rows]
    return with_provenance(["CPU (2 cores)", "precision (`auto`)", "BLEU", "updates (stopped by)",
                            "median tok/s", "whole script"], body, ("commit", "command"))


def train_vs_torch(rows: list[Row]) -> Lines:
    """train_vs_torch.csv: vtx's update against the torch reference's, a row per run group."""
    body = []
    for runs in groups(rows, ("machine", "instructions", "precision", "commit", "command")):
        body.append((runs, [runs[0]["machine"], runs[0]["precision"], steps(runs[0]["command"]),
                            "; ".join(number(run["vtx_tok_s"]) for run in runs),
                            "; ".join(number(run["ref_tok_s"]) for run in runs),
                            ", ".join(ratio(run["vtx_tok_s"], run["ref_tok_s"]) for run in runs)]))
    return with_provenance(["CPU", "precision", "timed updates", "vtx tok/s", "torch tok/s",
                            "vtx / torch"], body, ("instructions", "commit", "command"))


def train_precision(rows: list[Row]) -> Lines:
    """train_vs_torch.csv: bfloat16 against float32 where one command timed both."""
    body = []
    for runs in groups(rows, ("machine", "instructions", "commit", "command")):
        by_precision = {name: [run for run in runs if run["precision"] == name]
                        for name in ("float32", "mixed_bfloat16")}
        if not all(by_precision.values()):
            continue
        tok_s = {name: [float(run["vtx_tok_s"]) for run in group]
                 for name, group in by_precision.items()}
        mean = {name: sum(values) / len(values) for name, values in tok_s.items()}
        body.append((runs, [runs[0]["machine"], steps(runs[0]["command"]),
                            "; ".join(number(run["vtx_tok_s"]) for run in by_precision["float32"]),
                            "; ".join(number(run["vtx_tok_s"])
                                      for run in by_precision["mixed_bfloat16"]),
                            f"{mean['mixed_bfloat16'] / mean['float32']:.2f}x"]))
    return with_provenance(["CPU", "timed updates", "float32 tok/s", "bfloat16 tok/s",
                            "bfloat16 / float32 (means)"], body,
                           ("instructions", "commit", "command"))


def gpu_train(rows: list[Row]) -> Lines:
    """gpu_train.csv: vtx with XLA against the torch reference on one GPU, a row per run."""
    def maybe(text: str, shown: Callable[[str], str]) -> str:
        return shown(text) if text else "-"

    body = [([row], [row["gpu"], row["model"], number(row["target_tokens"]),
                     maybe(row["vtx_compile_s"], lambda text: text), number(row["vtx_tok_s"]),
                     maybe(row["torch_tok_s"], number),
                     maybe(row["torch_tok_s"], lambda text: ratio(row["vtx_tok_s"], text)),
                     f"{row['vtx_mfu_pct']}%", maybe(row["torch_mfu_pct"], lambda t: f"{t}%")])
            for row in rows]
    return with_provenance(["GPU", "model", "target tokens", "vtx compile s", "vtx tok/s",
                            "torch tok/s", "vtx / torch", "vtx MFU", "torch MFU"], body,
                           ("date", "command"))


def vtx_setting(row: Row) -> str:
    """vtx's setting of a decoding_vs_ct2.csv row: precision, --quantize, --max-tokens and
    --search-threads."""
    return (f"{row['precision']}, {row['vtx_quantize']}, {row['vtx_max_tokens']}, "
            f"{row['vtx_search_threads']}")


def ct2_setting(row: Row) -> str:
    """CTranslate2's setting of a decoding_vs_ct2.csv row."""
    return (f"{row['compute_type']}, {row['max_batch_size']} {row['batch_type']}, inter_threads "
            f"{row['ct2_inter_threads'] or '-'}")


def decoding(rows: list[Row]) -> Lines:
    """decoding_vs_ct2.csv: each run's vtx setting (the fastest of its sweep) against
    CTranslate2's fastest setting of the run, a row per run."""
    body = []
    for runs in groups(rows, ("machine", "commit", "command")):
        fastest = min(runs, key=lambda run: float(run["ct2_s"]))
        body.append((runs, [fastest["input"], fastest["threads"], fastest["stop"],
                            vtx_setting(fastest), f"{fastest['vtx_s']} s",
                            ct2_setting(fastest), str(len(runs)), f"{fastest['ct2_s']} s",
                            f"**{ratio(fastest['ct2_s'], fastest['vtx_s'])}**",
                            f"{fastest['identical_lines']} / {fastest['lines']}"]))
    return with_provenance(["input", "threads", "`--stop`",
                            "vtx: precision, `--quantize`, `--max-tokens`, `--search-threads`",
                            "vtx steady call",
                            "CTranslate2's fastest", "of settings timed",
                            "its steady call", "vtx / CTranslate2",
                            "identical lines"], body, ("machine", "commit", "command"))


def serve_load(rows: list[Row]) -> Lines:
    """serve_load.csv: `vtx serve` under concurrent clients against offline translation."""
    body = [([row], [row["clients"], number(row["seconds"]), number(row["lines_per_s"], 1),
                     number(row["offline_lines_per_s"], 1), f"**{row['served_over_offline']}**",
                     f"{row['p50_s']} / {row['p95_s']} / {row['p99_s']}",
                     f"{number(row['rss_first_mib'])}, {number(row['rss_last_mib'])}",
                     f"{number(row['identical_lines'])} / {number(row['lines'])}"])
            for row in rows]
    return with_provenance(["clients", "seconds", "served lines/s", "offline lines/s",
                            "served / offline", "latency p50 / p95 / p99 s",
                            "server RSS MiB (first, last)", "identical lines"], body,
                           ("machine", "checkpoint", "commit", "command"))


def serve_abuse(rows: list[Row]) -> Lines:
    """serve_abuse.csv: honest clients alone, then beside hostile ones, a pair of rows a run."""
    body = []
    for row in rows:
        body.append(([row], [f"{row['clients']} honest clients alone",
                             number(row["clean_lines_per_s"], 1),
                             f"{row['clean_p50_s']} / {row['clean_p99_s']}",
                             f"{row['clean_health_worst_ms']} ms",
                             f"{number(row['rss_start_mib'])} (start)"]))
        body.append(([row], [f"beside {row['hostile']} hostile clients ({row['mix']} mix)",
                             f"{number(row['abused_lines_per_s'], 1)} "
                             f"(**{row['throughput_ratio']}** of alone)",
                             f"{row['abused_p50_s']} / {row['abused_p99_s']} (p99 "
                             f"**{row['p99_ratio']}x**)",
                             f"**{row['abused_health_worst_ms']} ms**",
                             f"{number(row['rss_end_mib'])} (end)"]))
    return with_provenance(["run", "honest lines/s", "p50 / p99 s", "`/health` worst",
                            "server RSS MiB"], body, ("machine", "checkpoint", "commit", "command"))


def wsj_f1(rows: list[Row]) -> Lines:
    """wsj_f1_curve.csv: each run's last checkpoint, its minutes and beam-4 F1."""
    body = []
    for runs in groups(rows, ("run", "machine", "commit", "command")):
        last = runs[-1]
        body.append((runs, [last["run"], last["machine"], last["minutes"], last["dev_f1_beam4"],
                            last["test_f1_beam4"] or "-"]))
    return with_provenance(["run", "machine", "training minutes", "dev F1 (beam 4)",
                            "test F1 (beam 4)"], body, ("commit", "command"))


def ema(rows: list[Row]) -> Lines:
    """ema.csv: one quick start run with `--ema-decay`, each way of translating its weights."""
    body = [([row], [row["weights"], f"**{row['bleu']}**"]) for row in rows]
    return with_provenance(["weights translated (beam 4, alpha 0.6)", "BLEU"], body,
                           ("machine", "precision", "commit", "command"))


# NAME -> (its CSV, the layout of the selected rows)
TABLES: dict[str, tuple[str, Callable[[list[Row]], Lines]]] = {
    "quickstart": ("quickstart.csv", quickstart),
    "train_vs_torch": ("train_vs_torch.csv", train_vs_torch),
    "train_precision": ("train_vs_torch.csv", train_precision),
    "gpu_train": ("gpu_train.csv", gpu_train),
    "decoding_vs_ct2": ("decoding_vs_ct2.csv", decoding),
    "serve_load": ("serve_load.csv", serve_load),
    "serve_abuse": ("serve_abuse.csv", serve_abuse),
    "wsj_f1_curve": ("wsj_f1_curve.csv", wsj_f1),
    "ema": ("ema.csv", ema),
}


def render(spec: str, results: Path = RESULTS) -> str:
    """The table a marker's `NAME COLUMN=VALUE ...` stands for, as the page holds it.

    Raises:
        ValueError: an unknown NAME, a bad selector, or selectors that keep no row.
    """
    name, *selectors = shlex.split(spec)
    if name not in TABLES:
        raise ValueError(f"table {name!r}: not one of {', '.join(TABLES)}")
    csv_name, layout = TABLES[name]
    rows = select(read_rows(results / csv_name), selectors)
    if not rows:
        raise ValueError(f"table {spec!r}: no row of {csv_name} is selected")
    return "\n".join(layout(rows)) + "\n"


def rewrite(text: str, results: Path = RESULTS) -> tuple[str, list[str]]:
    """The page with each marked table written from its rows, and the specs of those that
    changed."""
    changed = []

    def replace(match: re.Match) -> str:
        body = render(match["spec"], results)
        if body != match["body"]:
            changed.append(match["spec"])
        return match[1] + body + match[4]

    return BLOCK.sub(replace, text), changed


def main(argv: list[str] | None = None) -> int:
    """--write rewrites the pages; --check says which tables differ (exit 1)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="rewrite the pages' tables in place")
    mode.add_argument("--check", action="store_true", help="exit 1 if a table differs")
    args = parser.parse_args(argv)
    stale = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        new, changed = rewrite(text)
        stale += [f"{page.relative_to(ROOT)}: <!-- table: {spec} -->" for spec in changed]
        if args.write and changed:
            page.write_text(new, encoding="utf-8")
    for line in stale:
        print(("rewrote " if args.write else "differs from its CSV rows: ") + line)
    return 1 if stale and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
