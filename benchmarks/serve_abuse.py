"""Honest clients of `vtx serve` beside hostile ones, against the same honest clients alone.

One `vtx serve` process on 127.0.0.1 (the tiny fixture model by default, as en-de).
`--clients` honest clients (`serve_load.py`'s: requests of 1-5 lines of `--input`, one after the
other) for `--duration` seconds alone: the clean run; and the same honest clients for as long
beside `--hostile` hostile clients: the abused run; the two cut in `--rounds` parts taken in turn
(clean, abused, clean, ...), so that a change in the machine's speed falls on both. The hostile
clients (by default one of each kind of `--mix`), each sending one
kind of abuse (round robin over the kinds) every `--hostile-interval` seconds (1 by default,
more often than an honest client under this load sends; 0: as fast as it is answered, a flood,
which no server on 2 cores serves honest clients through without a rate limit in front of it).
Each client, honest or hostile, connects from its own loopback address (127.0.0.N, 127.0.1.N),
as clients of a real server come from their own.

`--mix v1`, to POST /v1/translate:

- whitespace: a line of 450,000 spaces (about 3 pieces), with a 2,500-term glossary;
- glossary: a request glossary of 25,000 pairs over a line of 100,000 spaces;
- constraints: 16 lines of 2,000 constraint phrases each, at beam 16;
- cost: 64 lines of 250 pieces at beam 16;
- churn: a line with its own `lenpen`, sampling `seed` and `temperature` each request;
- slow: a body of 10,000 bytes sent a byte a second;
- malformed: lone surrogates, a 5,000-digit integer, 10,000-deep nesting, in turn;
- foreign: a POST from another site's Origin, and one as text/plain.

`--mix libre`, to LibreTranslate's routes (`--mix both`: the two mixes, the default):

- libre-markup: `format: html` of 300,000 tags (900 KB, no text to translate);
- libre-alternatives: 64 texts with `alternatives: 15`, which the limits allow (beam 16);
- libre-detect: POST /detect of 64 texts of 10,000 letters;
- libre-form: a URL-encoded form of 100,000 fields (q repeated), near the body limit;
- libre-shapes: `alternatives` of null, [], {}, [1] and a 5,000-digit number, a multipart part of
  an unknown charset, a nested multipart/mixed part, in turn.

A prober, a process of its own, asks GET /health every 50 ms throughout. Prints, for each run, the honest clients'
lines/s and p50/p99 latency and /health's worst latency, the ratios (abused over clean), what
the hostile requests were answered, and the server's RSS; a last line `RESULT {json}`, and with
`--csv FILE` the row. Targets (docs/benchmarks.md): honest lines/s >= 0.9 and p99 <= 1.5 of
the clean run's, /health worst < 100 ms, RSS bounded. Run it alone on a quiet machine.

Usage: python benchmarks/serve_abuse.py [--checkpoint PATH] [--input FILE] [--clients 32]
       [--mix both | --kinds KIND,...] [--hostile N] [--hostile-interval 1] [--duration 60]
       [--rounds 3] [--seed 0] [--csv FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import datetime
import json
import os
import random
import shlex
import sys
import time
from pathlib import Path

from serve_load import DEFAULT_CHECKPOINT, DEFAULT_INPUT, percentile, read_lines, rss_mib
from translate_speed import append_csv, commit, cpu_model, csv_header_error

MIXES = {"v1": ("whitespace", "glossary", "constraints", "cost", "churn", "slow", "malformed",
                 "foreign"),
         "libre": ("libre-markup", "libre-alternatives", "libre-detect", "libre-form",
                   "libre-shapes")}
MIXES["both"] = MIXES["v1"] + MIXES["libre"]
CSV_COLUMNS = ("machine", "checkpoint", "mix", "clients", "hostile", "hostile_interval_s",
               "seconds", "rounds",
               "clean_lines_per_s",
               "abused_lines_per_s", "throughput_ratio", "clean_p50_s", "clean_p99_s",
               "abused_p50_s", "abused_p99_s", "p99_ratio", "clean_health_worst_ms",
               "abused_health_worst_ms", "rss_start_mib", "rss_end_mib", "rss_max_mib",
               "hostile_answers", "commit", "date", "command")


LIBRE = {"source": "en", "target": "de"}
SHAPES = ("null", "[]", "{}", "[1]", "9" * 5000)


def hostile_request(kind: str, rng: random.Random, turn: int) -> tuple[str, bytes, dict]:
    """The route, body and headers of one hostile request of `kind` (not "slow")."""
    json_type = {"Content-Type": "application/json"}
    if kind.startswith("libre-"):
        return libre_request(kind, turn)
    if kind == "whitespace":
        body = {"text": [" " * 450_000 + "man"],
                "glossary": [[f"term{i}", f"Wort{i}"] for i in range(2_500)]}
    elif kind == "glossary":
        body = {"text": [" " * 100_000 + "term7"],
                "glossary": [[f"t{i}", f"W{i}"] for i in range(25_000)]}
    elif kind == "constraints":
        body = {"text": ["A man is riding a bike."] * 16, "beam": 16,
                "constraints": [[f"w{i}" for i in range(2_000)]] * 16}
    elif kind == "cost":
        body = {"text": ["a " * 250] * 64, "beam": 16}
    elif kind == "churn":
        body = ({"text": ["A man is riding a bike."], "lenpen": round(rng.uniform(0, 2), 6)}
                if turn % 2 else
                {"text": ["A dog runs."], "sampling": True, "seed": rng.randrange(1 << 30),
                 "temperature": round(rng.uniform(0.5, 1.5), 6)})
    elif kind == "malformed":
        return "/v1/translate", [b'{"text": ["\\ud800"]}', b'{"text": ["a"], "lenpen": ' + b"9" * 5000 + b"}",
                b"[" * 10_000 + b"]" * 10_000][turn % 3], json_type
    else:  # foreign
        headers = ({"Content-Type": "text/plain"} if turn % 2 else
                   {**json_type, "Origin": "http://evil.example.com"})
        return "/v1/translate", json.dumps({"text": ["A man."]}).encode(), headers
    return "/v1/translate", json.dumps(body).encode(), json_type


def libre_request(kind: str, turn: int) -> tuple[str, bytes, dict]:
    """The route, body and headers of one hostile request of a `--mix libre` kind."""
    json_type = {"Content-Type": "application/json"}
    if kind == "libre-markup":
        body = {**LIBRE, "q": "<a>" * 300_000, "format": "html"}
    elif kind == "libre-alternatives":
        body = {**LIBRE, "q": ["A man is riding a bike."] * 64, "alternatives": 15}
    elif kind == "libre-detect":
        return "/detect", json.dumps({"q": ["a" * 10_000] * 64}).encode(), json_type
    elif kind == "libre-form":
        return "/translate", ("source=en&target=de&" + "&".join(["q=a"] * 100_000)).encode(), \
            {"Content-Type": "application/x-www-form-urlencoded"}
    elif turn % 7 < 5:  # libre-shapes
        return "/translate", (json.dumps({**LIBRE, "q": "A man."})[:-1]
                              + f', "alternatives": {SHAPES[turn % 7]}}}').encode(), json_type
    else:
        part = ('Content-Type: text/plain; charset="x-unknown"\r\n' if turn % 7 == 5 else
                "Content-Type: multipart/mixed; boundary=inner\r\n")
        body = ('--b\r\nContent-Disposition: form-data; name="q"\r\n' + part
                + "\r\nA man.\r\n--b--\r\n").encode()
        return "/translate?source=en&target=de", body, \
            {"Content-Type": "multipart/form-data; boundary=b"}
    return "/translate", json.dumps(body).encode(), json_type


async def slow_body(url: str, stop: asyncio.Event, local: str) -> int:
    """A POST from address `local` whose 10,000-byte body comes a byte a second; the status
    answered (0: none)."""
    from urllib.parse import urlsplit

    address = urlsplit(url)
    reader, writer = await asyncio.open_connection(address.hostname, address.port,
                                                   local_addr=(local, 0))
    writer.write(b"POST /v1/translate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                 b"application/json\r\nContent-Length: 10000\r\n\r\n{")
    status = 0
    try:
        while not stop.is_set():
            try:
                line = await asyncio.wait_for(reader.readline(), 1.0)
                status = int(line.split()[1]) if line else 0
                break
            except asyncio.TimeoutError:
                writer.write(b" ")
                await writer.drain()
    except (ConnectionError, IndexError, ValueError):
        pass
    finally:
        writer.close()
    return status


async def hostile(local: str, url: str, kind: str, rng: random.Random, stop: asyncio.Event,
                  answers: collections.Counter, interval: float) -> None:
    """Requests of one kind of abuse from address `local`, one each `interval` seconds (or once
    the last is answered), until `stop`."""
    turn = 0
    async with client_session(local) as session:
        while not stop.is_set():
            started = time.monotonic()
            answers[await hostile_turn(session, local, url, kind, rng, stop, turn)] += 1
            turn += 1
            try:
                await asyncio.wait_for(stop.wait(),
                                       max(0.0, interval - (time.monotonic() - started)))
            except asyncio.TimeoutError:
                pass


def client_session(local: str):
    """An aiohttp session whose connections come from address `local`."""
    import aiohttp

    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0, local_addr=(local, 0)),
                                 timeout=aiohttp.ClientTimeout(total=None))


async def hostile_turn(session, local: str, url: str, kind: str, rng: random.Random,
                       stop: asyncio.Event, turn: int) -> str:
    """One hostile request of `kind`: "KIND STATUS"."""
    if kind == "slow":
        return f"{kind} {await slow_body(url, stop, local)}"
    route, body, headers = hostile_request(kind, rng, turn)
    async with session.post(url + route, data=body, headers=headers) as reply:
        await reply.read()
        return f"{kind} {reply.status}"


async def honest(local: str, url: str, lines: list[str], rng: random.Random,
                 stop: asyncio.Event, served: list) -> None:
    """`serve_load.py`'s client from address `local`: requests of 1-5 consecutive lines until
    `stop`."""
    async with client_session(local) as session:
        while not stop.is_set():
            await honest_turn(session, url, lines, rng, served)


async def honest_turn(session, url: str, lines: list[str], rng: random.Random,
                      served: list) -> None:
    """One honest request, its latency and lines told to `served`."""
    count = rng.randint(1, 5)
    start = rng.randrange(len(lines) - count + 1)
    sent = time.monotonic()
    async with session.post(url + "/v1/translate",
                            json={"text": lines[start:start + count]}) as reply:
        body = await reply.json()
    if reply.status != 200:
        raise RuntimeError(f"an honest request was answered {reply.status}: {body}")
    served.append((time.monotonic() - sent, len(body["translations"])))


# The prober, a process of its own: the clients' work in this one (building and reading
# bodies of a megabyte) would otherwise count as the server's wait.
PROBE = """
import http.client, json, sys, time
from urllib.parse import urlsplit
address, end, waits = urlsplit(sys.argv[1]), time.monotonic() + float(sys.argv[2]), []
connection = http.client.HTTPConnection(address.hostname, address.port, timeout=60)
while time.monotonic() < end:
    asked = time.monotonic()
    connection.request("GET", "/health")
    connection.getresponse().read()
    waits.append(time.monotonic() - asked)
    time.sleep(0.05)
print(json.dumps(waits))
"""


async def probe(url: str, seconds: float) -> list[float]:
    """GET /health every 50 ms for `seconds`, from a process of its own: how long each took."""
    prober = await asyncio.create_subprocess_exec(sys.executable, "-c", PROBE, url,
                                                  str(seconds), stdout=asyncio.subprocess.PIPE)
    out, _ = await prober.communicate()
    if prober.returncode != 0:
        raise RuntimeError(f"the /health prober failed (exit code {prober.returncode})")
    return json.loads(out)


async def run(url: str, pid: int, lines: list[str], args, hostile_count: int) -> dict:
    """One part of a run: the honest clients (and `hostile_count` hostile ones) for
    args.duration / args.rounds seconds."""
    served, rss, answers = [], [], collections.Counter()
    stop = asyncio.Event()
    kinds = args.kinds or MIXES[args.mix]
    seconds = args.duration / args.rounds
    tasks = [asyncio.create_task(honest(address(0, i), url, lines, random.Random(args.seed + i),
                                        stop, served))
             for i in range(args.clients)]
    tasks += [asyncio.create_task(hostile(address(1, i), url, kinds[i % len(kinds)],
                                          random.Random(args.seed + 1000 + i), stop, answers,
                                          args.hostile_interval))
              for i in range(hostile_count)]
    prober = asyncio.create_task(probe(url, seconds))
    started, cpu = time.monotonic(), (cpu_seconds(pid), time.process_time())
    while time.monotonic() - started < seconds:
        rss.append(rss_mib(pid))
        await asyncio.sleep(1.0)
    stop.set()
    elapsed = time.monotonic() - started
    server_cpu, client_cpu = cpu_seconds(pid) - cpu[0], time.process_time() - cpu[1]
    await asyncio.gather(*tasks)
    waits = await prober
    return {"seconds": elapsed, "served": served, "waits": waits,
            "rss_mib": [round(m, 1) for m in rss if m is not None],
            "server_cpu_s": server_cpu, "client_cpu_s": client_cpu, "answers": answers}


def joined(parts: list[dict]) -> dict:
    """The figures of a run's parts (`run`'s) together."""
    served = [item for part in parts for item in part["served"]]
    waits = [wait for part in parts for wait in part["waits"]]
    latencies = [latency for latency, _ in served]
    answers = sum((part["answers"] for part in parts), collections.Counter())
    return {"lines_per_s": round(sum(count for _, count in served)
                                 / sum(part["seconds"] for part in parts), 2),
            "requests": len(served),
            "p50_s": round(percentile(latencies, 0.5), 4),
            "p99_s": round(percentile(latencies, 0.99), 4),
            "health_worst_ms": round(1000 * max(waits), 1), "health_probes": len(waits),
            "rss_mib": [mib for part in parts for mib in part["rss_mib"]],
            "server_cpu_s": round(sum(part["server_cpu_s"] for part in parts), 1),
            "client_cpu_s": round(sum(part["client_cpu_s"] for part in parts), 1),
            "hostile_answers": dict(sorted(answers.items()))}


def cpu_seconds(pid: int) -> float:
    """The CPU seconds process `pid` has used (user and system)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def address(group: int, index: int) -> str:
    """The loopback address of client `index` of `group` (0: honest, 1: hostile)."""
    return f"127.0.{group * 64 + index // 250}.{2 + index % 250}"


def kind_list(value: str) -> tuple[str, ...]:
    """`--kinds`' kinds, each one of MIXES["both"]."""
    kinds = tuple(kind.strip() for kind in value.split(",") if kind.strip())
    unknown = [kind for kind in kinds if kind not in MIXES["both"]]
    if unknown or not kinds:
        raise argparse.ArgumentTypeError(
            f"unknown kind {(unknown or [value])[0]!r}: the kinds are {', '.join(MIXES['both'])}")
    return kinds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", type=Path, default=DEFAULT_CHECKPOINT)
    parser.add_argument("--input", type=Path, default=DEFAULT_INPUT)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--mix", choices=sorted(MIXES), default="both",
                        help="the hostile requests' kinds (module docstring)")
    parser.add_argument("--kinds", type=kind_list,
                        help="comma-separated kinds, in place of --mix's (module docstring)")
    parser.add_argument("--hostile", type=int,
                        help="hostile clients (default: one of each kind of --mix)")
    parser.add_argument("--hostile-interval", type=float, default=1.0,
                        help="seconds between a hostile client's requests (0: a flood)")
    parser.add_argument("--duration", type=float, default=60.0,
                        help="seconds of each run (clean, abused)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="parts each run is cut in, clean and abused in turn, so that a "
                             "machine's drift falls on both alike")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--csv", type=Path, help="append the run's row to this CSV")
    args = parser.parse_args(argv)
    if args.hostile is None:
        args.hostile = len(args.kinds or MIXES[args.mix])
    if args.csv and (error := csv_header_error(args.csv, CSV_COLUMNS)):
        parser.error(error)

    from vtx.serve.process import ServerProcess, request

    lines = read_lines(args.input)
    given = sys.argv[1:] if argv is None else argv
    command = f"python benchmarks/serve_abuse.py {shlex.join(given)}"
    print(f"machine: {cpu_model()}\ncommand: {command}")
    server = ServerProcess("--checkpoint", args.checkpoint, "--source-lang", "en",
                           "--target-lang", "de", "--max-queue",
                           max(1024, 5 * (args.clients + args.hostile)), "--read-timeout", 5)
    try:
        for body in ({"text": lines[:5]}, {"text": ["A man."], "constraints": [["Mann"]]},
                     {"text": ["A man."], "sampling": True}):
            request(server.url + "/v1/translate", body)  # traces the searches
        parts: dict[str, list[dict]] = {"clean": [], "abused": []}
        for _ in range(args.rounds):
            for name, hostile_count in (("clean", 0), ("abused", args.hostile)):
                parts[name].append(asyncio.run(run(server.url, server.process.pid, lines, args,
                                                   hostile_count)))
        clean, abused = joined(parts["clean"]), joined(parts["abused"])
    finally:
        code = server.stop()
    rss = [mib for pair in zip(parts["clean"], parts["abused"]) for part in pair
           for mib in part["rss_mib"]]  # in time order
    summary = {
        "machine": cpu_model(), "checkpoint": args.checkpoint.name,
        "mix": ",".join(args.kinds) if args.kinds else args.mix,
        "clients": args.clients,
        "hostile": args.hostile, "hostile_interval_s": args.hostile_interval,
        "seconds": args.duration, "rounds": args.rounds, "clean": clean, "abused": abused,
        "throughput_ratio": round(abused["lines_per_s"] / clean["lines_per_s"], 3),
        "p99_ratio": round(abused["p99_s"] / clean["p99_s"], 3),
        "rss_start_mib": rss[0], "rss_end_mib": rss[-1], "rss_max_mib": max(rss),
        "server_exit": code}
    for name, result in (("clean", clean), ("abused", abused)):
        print(f"{name}: honest {result['lines_per_s']} lines/s ({result['requests']} requests), "
              f"p50 {result['p50_s']} s, p99 {result['p99_s']} s; /health worst "
              f"{result['health_worst_ms']} ms of {result['health_probes']} probes; CPU s: server "
              f"{result['server_cpu_s']}, this script {result['client_cpu_s']}")
    print(f"abused / clean: throughput {summary['throughput_ratio']} (target >= 0.9), p99 "
          f"{summary['p99_ratio']} (target <= 1.5)")
    print("hostile requests answered: " + ", ".join(f"{key}: {count}" for key, count
                                                    in abused["hostile_answers"].items()))
    print(f"server RSS (MiB): start {summary['rss_start_mib']}, end {summary['rss_end_mib']}, "
          f"max {summary['rss_max_mib']}; exit code on SIGTERM {code}")
    if args.csv:
        row = {**{key: summary[key] for key in ("machine", "checkpoint", "mix", "clients",
                                                 "hostile",
                                                 "hostile_interval_s", "seconds", "rounds",
                                                 "throughput_ratio", "p99_ratio",
                                                 "rss_start_mib", "rss_end_mib",
                                                 "rss_max_mib")},
               **{f"{name}_{key}": summary[name][key] for name in ("clean", "abused")
                  for key in ("lines_per_s", "p50_s", "p99_s")},
               "clean_health_worst_ms": clean["health_worst_ms"],
               "abused_health_worst_ms": abused["health_worst_ms"],
               "hostile_answers": json.dumps(abused["hostile_answers"]), "commit": commit(),
               "date": datetime.date.today().isoformat(), "command": command}
        append_csv(args.csv, [row], CSV_COLUMNS)
    print("RESULT " + json.dumps(summary))
    return 0 if code == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
