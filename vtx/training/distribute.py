"""Choosing the tf.distribute strategy (every visible GPU on one host, or many hosts by TF_CONFIG
or a Slurm job step), and the collectives by which the workers of a run agree.

With the Keras and TensorFlow that pyproject.toml pins, `model.fit` fails under MultiWorkerMirroredStrategy
(keras-team/keras#20585) and `jit_compile` inside `fit` fails under MirroredStrategy, so vtx trains
with its own loop (`strategy.run`); with several replicas XLA compiles each replica's gradients
(one buffer with its loss sums) and each replica's Adam step (`FusedAdam.apply_flat_if`), the
buffers summed across replicas between them (`Trainer._last_micro_batch`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import sys
import threading
from typing import Callable

import numpy as np
import tensorflow as tf

from vtx.errors import ArgumentError, tf_message
from vtx import compile_cache

SUM = tf.distribute.ReduceOp.SUM


@dataclasses.dataclass(frozen=True)
class Topology:
    """Where this process sits in the cluster."""

    worker_index: int  # this host's index among the workers
    num_workers: int
    local_replicas: int  # replicas (devices) on this host
    is_chief: bool  # writes checkpoints, logs and plots


def _to_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def make_strategy(devices: list[str] | None = None,
                  log: Callable[[str], None] = _to_stderr) -> tf.distribute.Strategy:
    """MultiWorkerMirroredStrategy when TF_CONFIG is set or this process is a task of a Slurm
    job step of several (`srun`: `slurm_tf_config`, said through `log`), else MirroredStrategy
    over `devices` (default: every visible GPU, or the CPU when there is none). With several
    workers, it waits until every worker of the cluster has started, after saying so.

    Raises:
        ArgumentError: `devices` names a device TensorFlow does not see here, one twice, or is
            given with TF_CONFIG (argument `devices`).
        ValueError: a TF_CONFIG that is not a cluster of workers (`check_tf_config`).
        OSError: this worker cannot listen on its TF_CONFIG address (its port in use).
    """
    if not os.environ.get("TF_CONFIG") and (slurm := slurm_tf_config()) is not None:
        tf_config, said = slurm
        log(said)
        # Every later reader of the cluster (`topology`, TensorFlow's resolver) reads it here.
        os.environ["TF_CONFIG"] = json.dumps(tf_config)
    if os.environ.get("TF_CONFIG"):
        if devices:
            raise ArgumentError("{devices} does not apply to a run of several workers "
                                "(TF_CONFIG): each worker trains on every GPU it sees; "
                                "CUDA_VISIBLE_DEVICES chooses them")
        check_tf_config(os.environ["TF_CONFIG"])
        return _join_cluster(json.loads(os.environ["TF_CONFIG"]), log)
    if not devices:
        gpus = tf.config.list_logical_devices("GPU")
        devices = [d.name for d in gpus] or ["/cpu:0"]
    return tf.distribute.MirroredStrategy(checked_devices(devices))


def _join_cluster(tf_config: dict, log: Callable[[str], None]) -> tf.distribute.Strategy:
    """MultiWorkerMirroredStrategy of a checked TF_CONFIG: it returns once every worker has
    joined, and one whose peer never starts would otherwise wait in silence."""
    addresses, index = worker_addresses(tf_config)
    if len(addresses) > 1:
        log(f"waiting for the other workers of TF_CONFIG ({len(addresses)} workers: "
            f"{', '.join(addresses)}; this is worker {index}, {addresses[index]})")
    try:
        return _keeping_sigterm_handler(tf.distribute.MultiWorkerMirroredStrategy)
    except tf.errors.UnknownError as error:
        if "Could not start gRPC server" not in tf_message(error) or not addresses:
            raise
        port = addresses[index].rpartition(":")[2]
        raise OSError(f"TF_CONFIG: this worker ({index}, {addresses[index]}) cannot listen on "
                      f"port {port} (TensorFlow: {tf_message(error, lines=1)}): another "
                      f"process, such as a worker of an earlier run, holds it; end it or give "
                      f"this worker a free port in TF_CONFIG's cluster") from error


# The first port of a Slurm job's workers on a node (task k of the node listens on the next k-th):
# offset by the job id, so that two jobs sharing a node are unlikely to meet; all below Linux's
# ephemeral ports (32768 on), where srun and slurmstepd listen and would take a worker's port.
SLURM_PORT_BASE, SLURM_PORT_SPAN = 20000, 12000


def slurm_tf_config() -> tuple[dict, str] | None:
    """(the TF_CONFIG of this task's cluster, a line saying it) when this process is a task of
    a Slurm job step of several tasks (`srun -n N`, N > 1), by TensorFlow's
    `SlurmClusterResolver` over the step's variables: one worker a task, in the order of the
    step's nodes and tasks, each listening on a port from SLURM_PORT_BASE offset by the job id.
    Where nvidia-smi lists GPUs and CUDA_VISIBLE_DEVICES is not set (by Slurm's --gpus-per-task,
    or by hand), each task of a node gets its share of the node's GPUs (set in
    CUDA_VISIBLE_DEVICES). None outside such a step.

    Raises:
        ValueError: the step's variables do not resolve, or a node has more tasks than GPUs
            (TensorFlow's words and the variables named).
    """
    from tensorflow.python.distribute.cluster_resolver.slurm_cluster_resolver import (
        SlurmClusterResolver, expand_tasks_per_node)

    environ = os.environ  # the resolver reads it, and sets CUDA_VISIBLE_DEVICES in it
    tasks = environ.get("SLURM_STEP_NUM_TASKS", "1")
    if "SLURM_PROCID" not in environ or not tasks.isdecimal() or int(tasks) < 2:
        return None
    job = environ.get("SLURM_JOB_ID", "0")
    port = SLURM_PORT_BASE + (int(job) if job.isdecimal() else 0) % SLURM_PORT_SPAN
    names = ("SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_STEP_NODELIST",
             "SLURM_STEP_TASKS_PER_NODE")
    given = ", ".join(f"{name}={environ.get(name)!r}" for name in names)
    gpus = [] if "CUDA_VISIBLE_DEVICES" in environ else compile_cache.listed_gpus()
    try:
        most = max(expand_tasks_per_node(environ.get("SLURM_STEP_TASKS_PER_NODE", "")))
        if len(gpus) >= most:
            resolver = SlurmClusterResolver(port_base=port, gpus_per_node=len(gpus))
        elif gpus:
            raise ValueError(f"{most} tasks on a node would share its {len(gpus)} GPUs; run "
                             f"one task per GPU or per node (srun --ntasks-per-node)")
        else:  # GPUs set already, or none: one nominal GPU a task, none set
            resolver = SlurmClusterResolver(port_base=port, gpus_per_node=most, gpus_per_task=1,
                                            auto_set_gpu=False)
        cluster = resolver.cluster_spec().as_dict()
    except (RuntimeError, ValueError, KeyError) as error:
        raise ValueError(f"this Slurm job step does not resolve into a cluster of workers "
                         f"({error}; {given})") from error
    tf_config = {"cluster": cluster, "task": {"type": resolver.task_type,
                                              "index": resolver.task_id}}
    workers = cluster["worker"]
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    share = f"GPUs {visible} (CUDA_VISIBLE_DEVICES)" if visible else "no GPU set"
    said = (f"Slurm job {job} step {environ.get('SLURM_STEP_ID')}: {len(workers)} workers "
            f"({', '.join(workers)}); this task is worker {resolver.task_id} (SLURM_PROCID "
            f"{environ['SLURM_PROCID']}), with {share}")
    return tf_config, said


def worker_addresses(tf_config: dict) -> tuple[list[str], int]:
    """The host:port of every worker of a checked TF_CONFIG, in worker order (its chief first, as
    `topology` numbers them), and this process's place among them; no addresses and 0 without a
    cluster."""
    cluster = tf_config.get("cluster") or {}
    addresses = []
    for kind in ("chief", "worker"):
        entry = cluster.get(kind, [])
        addresses += [str(a) for a in (entry.values() if isinstance(entry, dict) else entry)]
    task = tf_config.get("task") or {}
    index = 0 if task.get("type") == "chief" else _task_index(task) + len(cluster.get("chief", []))
    return addresses, index if addresses else 0


def _keeping_sigterm_handler(make):
    """`make()`, with this process's SIGTERM handler put back after it (in the main thread, where
    Python can). MultiWorkerMirroredStrategy installs TensorFlow's own (its preemption notifier,
    which only logs "SIGTERM caught"; Python's `signal.getsignal` does not see it), so a SIGTERM
    before the training loop installs vtx's handlers would be swallowed and the run go on to its
    end."""
    in_main = threading.current_thread() is threading.main_thread()
    handler = signal.getsignal(signal.SIGTERM) if in_main else None
    strategy = make()
    if handler is not None:  # None: a handler not installed from Python, which it cannot put back
        signal.signal(signal.SIGTERM, handler)
    return strategy


def check_tf_config(text: str) -> None:
    """Refuse a TF_CONFIG that TensorFlow would fail on with its own words (or a traceback) at
    the cluster's start: not JSON, a cluster entry that is not host:port addresses, or a task
    that is not one of the cluster's (TensorFlow's spellings are taken: an index as a decimal
    string, a cluster entry as a dict; no cluster is one local worker, index 0).

    Raises:
        ValueError: naming TF_CONFIG and what is wrong in it.
    """
    try:
        tf_config = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"TF_CONFIG is not JSON ({error}): {text!r}") from error
    if not isinstance(tf_config, dict):
        raise ValueError(f"TF_CONFIG is not a JSON object: {text!r}")
    cluster, task = tf_config.get("cluster"), tf_config.get("task")
    if not cluster:
        # TensorFlow runs one local worker; vtx would count this one as worker `index` of
        # workers it does not have (and fail on an IndexError before training).
        if task is None or isinstance(task, dict) and (task.get("type") == "chief"
                                                       or _task_index(task) == 0):
            return
        raise ValueError(f"TF_CONFIG: task {task!r} has no \"cluster\" of workers (without one "
                         f"TensorFlow runs this process as the only worker, index 0): list "
                         f"every worker's host:port, such as \"cluster\": {{\"worker\": "
                         f"[\"host0:2222\", \"host1:2222\"]}}")
    sizes = _cluster_sizes(cluster)
    if not isinstance(task, dict):
        raise ValueError(f"TF_CONFIG has no \"task\" naming this worker, such as {{\"type\": "
                         f"\"worker\", \"index\": 0}}: {text!r}")
    kind, index = task.get("type"), _task_index(task)
    if kind not in ("worker", "chief") or not 0 <= index < sizes.get(kind, 0):
        workers = [f"{k} 0-{n - 1}" if n > 1 else f"{k} 0" for k, n in sizes.items()
                   if n and k in ("worker", "chief")]
        raise ValueError(f"TF_CONFIG: task {task!r} is not one of the cluster's workers: "
                         + (", ".join(workers) or "it lists no worker or chief address")
                         + " (vtx train runs chief and worker tasks only)")


def _task_index(task: dict) -> int:
    """The index of TF_CONFIG's `task` (0 when absent, as TensorFlow; -1 when not a whole
    number)."""
    index = task.get("index", 0)
    if isinstance(index, str) and index.isdecimal():
        index = int(index)
    return index if type(index) is int else -1


def _cluster_sizes(cluster) -> dict[str, int]:
    """The number of addresses of each task kind of TF_CONFIG's `cluster`.

    Raises:
        ValueError: a cluster that is not an object of host:port lists.
    """
    if not isinstance(cluster, dict):
        raise ValueError(f"TF_CONFIG: \"cluster\" is not an object of task lists: {cluster!r}")
    sizes = {}
    for kind, addresses in cluster.items():
        if isinstance(addresses, dict):
            addresses = list(addresses.values())
        if not isinstance(addresses, list):
            raise ValueError(f"TF_CONFIG: cluster {kind!r} is not a list of host:port: "
                             f"{addresses!r}")
        for address in addresses:
            host, _, port = str(address).rpartition(":")
            if not host or not port.isdecimal() or not 0 < int(port) < 65536:
                raise ValueError(f"TF_CONFIG: {address!r} in cluster {kind!r} is not host:port "
                                 f"with a port from 1 to 65535")
        sizes[kind] = len(addresses)
    return sizes


def _device_key(name: str) -> tuple[str, int] | None:
    """(type, index) of a device of this process named `name`; None when it names another job
    or task, no type or no single index (a "*")."""
    spec = tf.DeviceSpec.from_string(name)
    if (spec.job not in (None, "localhost") or spec.replica not in (None, 0)
            or spec.task not in (None, 0) or not spec.device_type or spec.device_index is None):
        return None
    return spec.device_type.upper(), spec.device_index


def checked_devices(devices: list[str]) -> list[str]:
    """`devices` (e.g. "/gpu:1", "GPU:0", a full "/job:.../device:CPU:0") as the names of
    TensorFlow's devices here. MirroredStrategy itself takes a GPU it does not have and places
    its work on the CPU in silence, and fails on a name twice with an assertion.

    Raises:
        ArgumentError: a name that is not a device, one TensorFlow does not see, or one twice.
    """
    seen = {_device_key(d.name): d.name for d in tf.config.list_logical_devices()}
    short = ", ".join(f"/{kind.lower()}:{index}" for kind, index in seen)
    names, keys = [], set()
    for device in devices:
        name = device.strip()
        try:
            key = _device_key(name) if name else None
        except ValueError:
            key = None
        if key is None:
            raise ArgumentError("{devices}: {name!r} is not a device of this process (such as "
                                "/gpu:0 or /cpu:0)", name=device)
        if key not in seen:
            hint = unseen_gpus_warning() if key[0] == "GPU" else None
            raise ArgumentError("{devices}: {name!r} is not a device TensorFlow sees here (it "
                                "sees {short}){hint}", name=name, short=short,
                                hint=f"; {hint.removeprefix('warning: ')}" if hint else "")
        if key in keys:
            raise ArgumentError("{devices} names {name!r} twice", name=name)
        keys.add(key)
        names.append(seen[key])
    return names


def topology(strategy: tf.distribute.Strategy) -> Topology:
    """This process's place in the cluster described by TF_CONFIG (one worker without it)."""
    addresses, index = worker_addresses(json.loads(os.environ.get("TF_CONFIG") or "{}"))
    num_workers = max(len(addresses), 1)
    return Topology(worker_index=index, num_workers=num_workers,
                    local_replicas=strategy.num_replicas_in_sync // num_workers,
                    is_chief=index == 0)


class Collectives:
    """What the workers of a run agree on, each call one collective over every replica when
    there are several workers (TF_CONFIG), nothing crossing a process with one. Every worker
    must make the same calls in the same order, or they wait for each other for ever."""

    def __init__(self, strategy: tf.distribute.Strategy, place: Topology):
        self.strategy, self.topology = strategy, place

    def per_replica(self, local_values: list):
        """This worker's `local_values`, one a local replica, as a distributed value (no
        collective: each worker places its own)."""
        local = self.topology.local_replicas
        return self.strategy.experimental_distribute_values_from_function(
            lambda context: local_values[context.replica_id_in_sync_group % local])

    def any_worker(self, flag: bool) -> bool:
        """True when `flag` is true on any worker."""
        if self.topology.num_workers == 1:
            return flag
        value = self.per_replica([np.float32(flag)] * self.topology.local_replicas)
        return float(self.strategy.reduce(SUM, value, axis=None)) > 0

    def gather(self, row: np.ndarray) -> np.ndarray:
        """Every worker's `row`, one a worker in worker order (values exact: each is summed
        with zeros only)."""
        workers = self.topology.num_workers
        if workers == 1:
            return np.asarray(row, np.float64)[None]
        table = np.zeros((workers, *np.shape(row)), np.float64)
        table[self.topology.worker_index] = row
        values = [table if i == 0 else np.zeros_like(table)
                  for i in range(self.topology.local_replicas)]
        return self.strategy.reduce(SUM, self.per_replica(values), axis=None).numpy()

    def every_worker(self, value: float) -> list[float]:
        """Every worker's `value`, in worker order."""
        return [float(v) for v in self.gather(np.array([value]))[:, 0]]


# What a collective raises when another worker is gone: a few seconds after another worker is
# killed, e.g. UnavailableError "Collective ops is aborted by: ... The following tasks are
# unhealthy (stopped sending heartbeats)".
PEER_ERRORS = ("UnavailableError", "AbortedError", "CancelledError", "DeadlineExceededError")


def peer_failure(error: Exception, num_workers: int) -> str | None:
    """What to tell the user when `error` says that another of the run's `num_workers` workers
    stopped or cannot be reached (None when it does not, or with one worker): TensorFlow's own
    words and what to do."""
    if num_workers == 1 or type(error).__name__ not in PEER_ERRORS:
        return None
    return (f"another worker of this run stopped or cannot be reached ({type(error).__name__}: "
            f"{tf_message(error)}); the checkpoints written are kept: see that worker's log for "
            f"why, then start every worker again (the same TF_CONFIG, or srun) to resume from the "
            f"newest")


def unseen_gpus_warning() -> str | None:
    """A warning when `nvidia-smi -L` lists GPUs but TensorFlow sees none (TensorFlow without its
    CUDA libraries would otherwise train on the CPU in silence); None when all is as it looks."""
    if tf.config.list_physical_devices("GPU"):
        return None
    gpus = compile_cache.listed_gpus()
    if not gpus:
        return None
    return (f"warning: nvidia-smi lists {len(gpus)} GPU(s) but TensorFlow sees none, so this "
            f"runs on the CPU; install TensorFlow's CUDA libraries with "
            f"pip install 'vtx[gpu]' (tensorflow[and-cuda]) and check LD_LIBRARY_PATH")
