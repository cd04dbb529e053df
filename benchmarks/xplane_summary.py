"""Where an update's time goes: a text summary of a TensorFlow profiler trace.

`tf.profiler.experimental.start(DIR)` ... `stop()` writes DIR/plugins/profile/<run>/<host>.xplane.pb
(an XSpace protobuf). TensorBoard's profile plugin reads it, but that plugin is not a vtx
dependency and a GPU session has no browser; this reads the protobuf with the classes TensorFlow
ships (`tensorflow.tsl.profiler.protobuf.xplane_pb2`).

* On a GPU the device plane (`/device:GPU:N`) holds one line per stream with every kernel and copy
  that ran: the span from the first start to the last end, the time the device was busy (the
  union of the intervals, so that overlapping streams count once) and so idle, each kind's share
  of the kernel time (`KINDS`: matrix products are the cuBLAS / cuBLASLt / cutlass / XLA gemm
  kernels), and the kernels that took longest.
* With a GPU plane, also what the host did meanwhile: the CUDA driver calls (kernel launches,
  copies) and TensorFlow's own events, by total time and count an update (`host_calls`): a
  device idle between updates waits for these.
* Without a device plane (a CPU), the operations on TensorFlow's executor threads instead:
  TensorFlow ops ("scope/name:Type") by type; XLA's thunks by HLO name (`fusion.3` -> `fusion`).
  Several threads run ops at once, so busy time is again the union.

Usage: python benchmarks/xplane_summary.py DIR [--updates N] [--top K]
(`benchmarks/gpu_train.py --profile DIR` profiles updates and prints this after its table.)
"""

from __future__ import annotations

import argparse
import dataclasses
import re
from collections import defaultdict
from pathlib import Path

# (kind, pattern on the lower-cased kernel or op name); the first match wins.
KINDS = [
    ("matrix products", r"gemm|xmma|cutlass|nvjet|cublas|matmul|dot|conv"),
    ("random numbers", r"rng|philox|random|threefry"),
    ("collectives", r"nccl|all_?reduce|all_?gather|collective"),
    ("copies and transposes", r"memcpy|memset|copy|transpose|concat|slice|gather|scatter"),
    ("reductions", r"reduce|reduction|softmax|norm|sum|mean|max"),
    ("element-wise fusions", r"fusion|loop|elementwise|add|mul|sub|div|relu|exp|cast|convert|select"),
]
# Events on the CPU's executor threads that wrap operations rather than being one.
_WRAPPERS = re.compile(r"::|^ParallelFor|^Executor|^ThreadpoolListener|^EagerExecute|^TFE_|^Thunk")


@dataclasses.dataclass
class Event:
    name: str
    start_ps: int
    duration_ps: int


def kind_of(name: str) -> str:
    """The `KINDS` entry whose pattern matches `name` first, or "other"."""
    lowered = name.lower()
    for kind, pattern in KINDS:
        if re.search(pattern, lowered):
            return kind
    return "other"


def find_trace(directory) -> Path:
    """The newest *.xplane.pb under `directory`.

    Raises:
        FileNotFoundError: none there (naming the directory).
    """
    traces = sorted(Path(directory).glob("**/*.xplane.pb"), key=lambda p: p.stat().st_mtime)
    if not traces:
        raise FileNotFoundError(f"no *.xplane.pb under {directory}: was the profiler started "
                                f"there and stopped?")
    return traces[-1]


def read_events(space) -> tuple[str, list[Event]]:
    """(where, events): the kernels of the first GPU plane's streams, else the CPU's ops."""
    devices = sorted((p for p in space.planes if p.name.startswith("/device:GPU:")),
                     key=lambda p: p.name)
    if devices:
        plane = devices[0]
        lines = [l for l in plane.lines if l.name.startswith("Stream")] or list(plane.lines)
        return plane.name, _events(plane, lines, lambda name: name)
    hosts = [p for p in space.planes if p.name == "/host:CPU"]
    if not hosts:
        raise ValueError(f"the trace holds neither a GPU nor a CPU plane "
                         f"(planes: {', '.join(p.name for p in space.planes) or 'none'})")
    plane = hosts[0]
    lines = [l for l in plane.lines if l.name != "python"]
    return plane.name, _events(plane, lines, _cpu_op_name)


def _cpu_op_name(name: str) -> str | None:
    """"scope/x:MatMul" -> "MatMul"; "fusion.3", "MatMul_1" -> "fusion", "MatMul"; None for
    wrappers."""
    if _WRAPPERS.search(name):
        return None
    if ":" in name:
        return name.rsplit(":", 1)[1]
    return re.sub(r"([._]\d+)+$", "", name)


def _events(plane, lines, rename) -> list[Event]:
    events = []
    for line in lines:
        origin_ps = line.timestamp_ns * 1000
        for event in line.events:
            name = rename(plane.event_metadata[event.metadata_id].name)
            if name is not None and event.duration_ps > 0:
                events.append(Event(name, origin_ps + event.offset_ps, event.duration_ps))
    return events


def busy_ps(events: list[Event]) -> int:
    """The length of the union of the events' intervals."""
    total, end = 0, None
    for event in sorted(events, key=lambda e: e.start_ps):
        stop = event.start_ps + event.duration_ps
        if end is None or event.start_ps >= end:
            total += event.duration_ps
            end = stop
        elif stop > end:
            total += stop - end
            end = stop
    return total


def summarize(events: list[Event], updates: int = 1, top: int = 15) -> dict:
    """Per update: span, busy and idle milliseconds, milliseconds by kind, the top names.

    Returns:
        {"span_ms", "busy_ms", "kernel_ms", "kinds": [(kind, ms, share)], "top": [(name, ms,
        count)]}, every time divided by `updates`; kinds and names longest first.
    """
    if not events:
        raise ValueError("the trace holds no kernels or ops: did the profiled updates run?")
    per = 1e9 * updates  # picoseconds -> milliseconds an update
    span = max(e.start_ps + e.duration_ps for e in events) - min(e.start_ps for e in events)
    by_kind, by_name, counts = defaultdict(int), defaultdict(int), defaultdict(int)
    for event in events:
        by_kind[kind_of(event.name)] += event.duration_ps
        by_name[event.name] += event.duration_ps
        counts[event.name] += 1
    kernel = sum(by_kind.values())
    kinds = sorted(by_kind.items(), key=lambda item: -item[1])
    names = sorted(by_name.items(), key=lambda item: -item[1])[:top]
    return {"span_ms": span / per, "busy_ms": busy_ps(events) / per, "kernel_ms": kernel / per,
            "kinds": [(k, ps / per, ps / kernel) for k, ps in kinds],
            "top": [(n, ps / per, counts[n] / updates) for n, ps in names]}


def format_summary(where: str, summary: dict, updates: int) -> str:
    busy = summary["busy_ms"] / summary["span_ms"] if summary["span_ms"] else 0.0
    lines = [f"profile of {updates} update(s) on {where}, per update: span "
             f"{summary['span_ms']:.1f} ms, busy {summary['busy_ms']:.1f} ms ({busy:.0%}; idle "
             f"{summary['span_ms'] - summary['busy_ms']:.1f} ms), kernel/op time "
             f"{summary['kernel_ms']:.1f} ms",
             f"  {'kind':24} {'ms':>9} {'share':>6}"]
    lines += [f"  {kind:24} {ms:9.2f} {share:6.1%}" for kind, ms, share in summary["kinds"]]
    lines.append(f"  {'longest':60} {'ms':>9} {'count':>7}")
    lines += [f"  {name[:60]:60} {ms:9.2f} {count:7.1f}" for name, ms, count in summary["top"]]
    return "\n".join(lines)


def events_by_name(space, keep_plane, updates: int = 1, top: int = 15,
                   rename=lambda name: name) -> list[tuple[str, str, float, float]]:
    """The events of the planes whose name `keep_plane` accepts, by (plane, `rename`d event
    name): (plane, name, ms, count) an update, longest first. Events nest (a launch inside
    XlaRun inside the call), so their times overlap."""
    totals, counts = defaultdict(int), defaultdict(int)
    for plane in space.planes:
        if not keep_plane(plane.name):
            continue
        for line in plane.lines:
            for event in line.events:
                key = (plane.name, rename(plane.event_metadata[event.metadata_id].name))
                totals[key] += event.duration_ps
                counts[key] += 1
    longest = sorted(totals.items(), key=lambda item: -item[1])[:top]
    return [(plane, name, ps / (1e9 * updates), counts[plane, name] / updates)
            for (plane, name), ps in longest]


def host_calls(space, updates: int = 1, top: int = 15) -> list[tuple[str, str, float, float]]:
    """With a GPU plane: what the host did meanwhile (`events_by_name` of every /host: plane:
    the CUDA driver calls CUPTI saw on /host:CUPTI, kernel launches, copies, graph launches, and
    TensorFlow's own events on /host:CPU, the function call, XlaCompile's cache lookup, XlaRun).
    Empty without a GPU plane (the summary is then the host's already)."""
    if not any(p.name.startswith("/device:GPU:") for p in space.planes):
        return []
    return events_by_name(space, lambda name: name.startswith("/host:"), updates, top)


def format_events(title: str, rows, width: int = 40) -> str:
    """`events_by_name`'s rows as a table under `title`."""
    lines = [f"  {title:{width}} {'plane':12} {'ms':>9} {'count':>7}"]
    lines += [f"  {name[:width]:{width}} {plane[6:18]:12} {ms:9.2f} {count:7.1f}"
              for plane, name, ms, count in rows]
    return "\n".join(lines)


def load_space(directory):
    """The XSpace of the newest trace under `directory`."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    space.ParseFromString(find_trace(directory).read_bytes())
    return space


def load_trace(directory) -> tuple[str, list[Event]]:
    """`read_events` of the newest trace under `directory`."""
    return read_events(load_space(directory))


def summarize_directory(directory, updates: int = 1, top: int = 15) -> str:
    """The formatted summary of the newest trace under `directory` (and, for a GPU, the
    host's calls meanwhile)."""
    space = load_space(directory)
    where, events = read_events(space)
    text = format_summary(where, summarize(events, updates, top), updates)
    if calls := host_calls(space, updates, top):
        text += "\n" + format_events("host meanwhile (nested: times overlap)", calls)
    return text


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("directory", help="the directory the profiler was started with")
    parser.add_argument("--updates", type=int, default=1, help="updates the trace holds")
    parser.add_argument("--top", type=int, default=15, help="longest kernels or ops to list")
    args = parser.parse_args(argv)
    if args.updates < 1:
        parser.error(f"--updates must be >= 1, got {args.updates}")
    print(summarize_directory(args.directory, args.updates, args.top))


if __name__ == "__main__":
    main()
