"""Load on `vtx serve`: concurrent clients for a fixed time, against `vtx translate` offline.

A `vtx serve` process on 127.0.0.1 (its decoding flags: `--beam`, `--lenpen`, `--max-tokens`,
`--batch-wait-ms`) gets `--clients` concurrent clients for `--duration` seconds; each sends
requests of 1 to 5 consecutive lines (uniformly, from a random place of `--input`, default
Multi30k test_2016 English) one after the other, as soon as its previous one is answered. The
server's RSS (/proc/PID/status) is sampled every `--rss-every` seconds; one request before the
clock starts traces the search. Then the server is stopped
with SIGTERM (it must exit 0) and the Translator `vtx translate` uses translates every line that
was served, in this process, with the same settings and positional scores (the server computes
them for every line): its steady call (after one that traces the search) is the offline
throughput. Each served line's hypotheses must equal the offline ones (texts and pieces). The
first `--alone` requests are translated again, each alone: the median of those times is what a
lone client's latency is compared with.

Prints the machine, the command, throughput (lines/s, requests/s), latency p50/p95/p99, the RSS
over time, the offline throughput and the ratio, and with --json a last line of JSON with all of
it; `--csv FILE` appends the run's row (benchmarks/results/serve_load.csv, plotted by plot.py). Exit 1 when a served line differs from the offline one. Run it alone on a quiet machine.

Usage: python benchmarks/serve_load.py [--checkpoint PATH] [--input FILE] [--clients 32]
       [--duration 60] [--beam 4] [--lenpen 0.6] [--max-tokens 4096] [--batch-wait-ms 5]
       [--search-threads 2] [--precision auto] [--alone 100]
       [--rss-every 1] [--seed 0] [--json] [--csv FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import os
import random
import shlex
import sys
import time
from pathlib import Path

from translate_speed import append_csv, commit, cpu_model, csv_header_error

from vtx.precision import AUTO, DECODING_PRECISIONS  # (no TensorFlow)

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("VTX_SHARED_DATA", ROOT.parent / "shared" / "data"))
DEFAULT_INPUT = SHARED_DATA / "multi30k" / "test_2016_flickr.en.gz"
DEFAULT_CHECKPOINT = ROOT / "tests" / "fixtures" / "multi30k_tiny.npz"


def read_lines(path: Path) -> list[str]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        return [line.rstrip("\n") for line in handle if line.strip()]


def rss_mib(pid: int) -> float | None:
    """The process's resident memory, or None once it has ended."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


async def client(session, url: str, lines: list[str], rng: random.Random, deadline: float,
                 served: list) -> None:
    """Requests of 1-5 consecutive lines, one after the other, until `deadline`."""
    while time.monotonic() < deadline:
        count = rng.randint(1, 5)
        start = rng.randrange(len(lines) - count + 1)
        text = lines[start:start + count]
        sent = time.monotonic()
        async with session.post(url + "/v1/translate", json={"text": text}) as reply:
            body = await reply.json()
        if reply.status != 200:
            raise RuntimeError(f"the server answered {reply.status}: {body}")
        served.append((time.monotonic() - sent, body["translations"]))


async def sample_rss(pid: int, every: float, stop: asyncio.Event, started: float,
                     samples: list) -> None:
    while not stop.is_set():
        samples.append((round(time.monotonic() - started, 1), rss_mib(pid)))
        try:
            await asyncio.wait_for(stop.wait(), every)
        except asyncio.TimeoutError:
            pass


async def load(url: str, pid: int, lines: list[str], args) -> tuple[list, list, float]:
    """(latency and records of each request, RSS samples, seconds the load ran)."""
    import aiohttp

    served, samples, stop = [], [], asyncio.Event()
    started = time.monotonic()
    deadline = started + args.duration
    connector = aiohttp.TCPConnector(limit=args.clients)
    timeout = aiohttp.ClientTimeout(total=None)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        sampler = asyncio.create_task(sample_rss(pid, args.rss_every, stop, started, samples))
        await asyncio.gather(*(client(session, url, lines, random.Random(args.seed + i),
                                      deadline, served) for i in range(args.clients)))
        elapsed = time.monotonic() - started
        stop.set()
        await sampler
    return served, samples, elapsed


def offline(checkpoint: Path, lines: list[str], args, requests: list[list[str]],
            precision) -> tuple[dict, float, float]:
    """Each line's hypotheses from the Translator `vtx translate` uses, built in `precision`
    (a `vtx.precision.DecodingPrecision`), its steady lines/s, and the median time of
    `requests` (lists of lines) each translated alone."""
    from vtx.inference.decoding import DecodeOptions
    from vtx.inference.loading import load_models
    from vtx.inference.translate import line_record
    from vtx.inference.translator import Translator

    options = DecodeOptions(beam=args.beam, lenpen=args.lenpen, max_tokens=args.max_tokens,
                            positional_scores=True)
    translator = Translator(*load_models([checkpoint], precision=precision), options)
    translator.translate(lines)  # traces the search
    started = time.monotonic()
    results = translator.translate(lines)
    seconds = time.monotonic() - started
    records = {line: line_record(translator, 0, line, hypotheses)["hypotheses"]
               for line, hypotheses in zip(lines, results)}
    alone = []
    for text in requests:
        started = time.monotonic()
        translator.translate(text)
        alone.append(time.monotonic() - started)
    return records, len(lines) / seconds, percentile(alone, 0.5) if alone else float("nan")


CSV_COLUMNS = ("machine", "checkpoint", "clients", "seconds", "requests", "lines_per_s",
               "offline_lines_per_s", "served_over_offline", "p50_s", "p95_s", "p99_s",
               "rss_first_mib", "rss_last_mib", "rss_max_mib", "identical_lines", "lines",
               "commit", "date", "command")


def csv_row(summary: dict, checkpoint: Path, command: str) -> dict:
    """The run's row of CSV_COLUMNS."""
    import datetime

    rss = [mib for _, mib in summary["rss_mib"]]
    return {**{key: summary[key] for key in ("machine", "clients", "seconds", "requests",
                                              "lines_per_s", "offline_lines_per_s",
                                              "served_over_offline", "identical_lines",
                                              "lines")},
            "checkpoint": checkpoint.name,
            **{f"{key}_s": value for key, value in summary["latency_s"].items()},
            "rss_first_mib": rss[0], "rss_last_mib": rss[-1], "rss_max_mib": max(rss),
            "commit": commit(), "date": datetime.date.today().isoformat(), "command": command}


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", type=Path, default=DEFAULT_CHECKPOINT)
    parser.add_argument("--input", type=Path, default=DEFAULT_INPUT)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of load")
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--lenpen", type=float, default=0.6)
    parser.add_argument("--max-tokens", type=int, default=4096)
    parser.add_argument("--batch-wait-ms", type=float, default=5.0)
    parser.add_argument("--search-threads", type=int, default=2)
    parser.add_argument("--precision", choices=DECODING_PRECISIONS, default=AUTO,
                        help="as vtx serve's; auto is chosen once, here, and the server and "
                             "the offline Translator are both built in what it chose")
    parser.add_argument("--alone", type=int, default=100,
                        help="served requests whose lines are also translated alone offline, "
                             "for the latency's ratio")
    parser.add_argument("--rss-every", type=float, default=1.0, help="seconds between samples")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="a last line of JSON")
    parser.add_argument("--csv", type=Path, help="append the run's row to this CSV")
    args = parser.parse_args(argv)
    if args.csv and (error := csv_header_error(args.csv, CSV_COLUMNS)):
        parser.error(error)  # before the load, not after it

    from vtx.precision import resolve_decoding_precision
    from vtx.serve.process import ServerProcess, request

    lines = read_lines(args.input)
    print(f"machine: {cpu_model()}")
    precision = resolve_decoding_precision(args.precision)
    print(precision.log_line())
    given = sys.argv[1:] if argv is None else argv
    command = f"python benchmarks/serve_load.py {shlex.join(given)}"
    print(f"command: {command}")
    server = ServerProcess("--checkpoint", args.checkpoint, "--beam", args.beam, "--lenpen",
                           args.lenpen, "--max-tokens", args.max_tokens, "--batch-wait-ms",
                           args.batch_wait_ms, "--search-threads", args.search_threads,
                           "--precision", precision.name, "--max-queue", max(1024, 5 * args.clients))
    try:
        request(server.url + "/v1/translate", {"text": lines[:5]})  # traces the search
        served, samples, elapsed = asyncio.run(load(server.url, server.process.pid, lines, args))
    finally:
        code = server.stop()
    if code != 0:
        print(f"vtx serve exited {code} on SIGTERM:\n{''.join(server.stderr[-20:])}")
        return 1
    latencies = [latency for latency, _ in served]
    records = [record for _, reply in served for record in reply]
    unique = list(dict.fromkeys(record["source"] for record in records))
    alone = [[record["source"] for record in reply] for _, reply in served[:args.alone]]
    expected, offline_rate, alone_p50 = offline(args.checkpoint, unique, args, alone,
                                                    precision)
    strip = lambda hypotheses: [(h["text"], h["tokens"], h["finished"]) for h in hypotheses]
    differing = [record["source"] for record in records
                 if strip(record["hypotheses"]) != strip(expected[record["source"]])]
    summary = {
        "machine": cpu_model(), "precision": precision.name, "clients": args.clients, "seconds": round(elapsed, 2),
        "requests": len(served), "lines": len(records),
        "lines_per_s": round(len(records) / elapsed, 2),
        "requests_per_s": round(len(served) / elapsed, 2),
        "latency_s": {f"p{p}": round(percentile(latencies, p / 100), 4) for p in (50, 95, 99)},
        "rss_mib": [(t, round(m, 1)) for t, m in samples if m is not None],
        "offline_lines_per_s": round(offline_rate, 2),
        "served_over_offline": round(len(records) / elapsed / offline_rate, 3),
        "identical_lines": len(records) - len(differing), "differing_lines": len(differing),
        "alone_p50_s": round(alone_p50, 4),
        "p50_over_alone": round(percentile(latencies, 0.5) / alone_p50, 3)}
    print(f"served: {summary['requests']} requests, {summary['lines']} lines in "
          f"{summary['seconds']} s by {args.clients} clients: {summary['lines_per_s']} lines/s, "
          f"{summary['requests_per_s']} requests/s")
    print("latency (s): " + ", ".join(f"{k} {v}" for k, v in summary["latency_s"].items())
          + f"; p50 of the first {len(alone)} requests each translated alone offline "
          f"{summary['alone_p50_s']} (served p50 / it: {summary['p50_over_alone']})")
    print("server RSS (MiB) over time: " + ", ".join(f"{t} s {m}"
                                                      for t, m in summary["rss_mib"]))
    print(f"offline (the Translator of vtx translate, {len(unique)} distinct lines): "
          f"{summary['offline_lines_per_s']} lines/s; served / offline "
          f"{summary['served_over_offline']}")
    print(f"outputs identical to offline: {summary['identical_lines']} of {len(records)} lines"
          + (f"; differing, e.g. {differing[0]!r}" if differing else ""))
    if args.csv:
        append_csv(args.csv, [csv_row(summary, args.checkpoint, command)], CSV_COLUMNS)
    if args.json:
        print(json.dumps(summary))
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main())
