import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
from types import SimpleNamespace

import pytest

from tests.conftest import REPO_ROOT
from vtx.errors import ArgumentError
from vtx.training.distribute import (Topology, check_tf_config, checked_devices, make_strategy,
                                        topology, unseen_gpus_warning, worker_addresses)


def cluster_config(task_type, index):
    return json.dumps({"cluster": {"chief": ["host0:2222"], "worker": ["host1:2222", "host2:2222"]},
                       "task": {"type": task_type, "index": index}})


@pytest.mark.parametrize("task_type,index,expected", [
    ("chief", 0, Topology(worker_index=0, num_workers=3, local_replicas=2, is_chief=True)),
    ("worker", 0, Topology(worker_index=1, num_workers=3, local_replicas=2, is_chief=False)),
    ("worker", 1, Topology(worker_index=2, num_workers=3, local_replicas=2, is_chief=False)),
])
def test_a_chief_in_tf_config_is_worker_zero_and_the_only_chief(monkeypatch, task_type, index,
                                                                 expected):
    monkeypatch.setenv("TF_CONFIG", cluster_config(task_type, index))
    # topology() reads only the replica count of the strategy: 2 devices on each of 3 hosts.
    assert topology(SimpleNamespace(num_replicas_in_sync=6)) == expected


def test_without_tf_config_one_worker_holds_every_replica(monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    assert topology(SimpleNamespace(num_replicas_in_sync=8)) == Topology(0, 1, 8, True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fake_nvidia_smi(folder, output):
    """An `nvidia-smi` on PATH that prints `output` (TensorFlow itself is the real one)."""
    script = folder / "nvidia-smi"
    script.write_text(f"#!/bin/sh\nprintf '{output}'\n")
    script.chmod(0o755)


def test_gpus_listed_by_nvidia_smi_but_unseen_by_tensorflow_are_named(tmp_path, monkeypatch):
    import tensorflow as tf

    if tf.config.list_physical_devices("GPU"):
        pytest.skip("TensorFlow sees a GPU on this machine")
    fake_nvidia_smi(tmp_path, "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)\\nGPU 1: NVIDIA H100\\n")
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    warning = unseen_gpus_warning()
    assert "nvidia-smi lists 2 GPU(s) but TensorFlow sees none" in warning
    assert "vtx[gpu]" in warning
    fake_nvidia_smi(tmp_path, "No devices were found\\n")
    assert unseen_gpus_warning() is None


def test_xla_and_its_cache_are_on_by_default_on_a_gpu_machine_only(tmp_path, monkeypatch):
    from vtx import compile_cache

    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    fake_nvidia_smi(tmp_path, "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)\\n")
    assert compile_cache.default_directory(tmp_path / "run") == tmp_path / "run" / "xla_cache"
    assert compile_cache.jit_by_default(None)  # XLA on by default where a GPU is listed
    assert compile_cache.jit_by_default(["/gpu:0", "/gpu:1"])
    assert not compile_cache.jit_by_default(["/cpu:0"])  # ... unless the run is on the CPU
    fake_nvidia_smi(tmp_path, "No devices were found\\n")
    assert compile_cache.default_directory(tmp_path / "run") is None
    assert not compile_cache.jit_by_default(None)
    monkeypatch.setenv("TF_XLA_FLAGS", "--tf_xla_auto_jit=2 "
                                       "--tf_xla_persistent_cache_directory=/old")
    compile_cache.enable(tmp_path / "cache")
    assert os.environ["TF_XLA_FLAGS"] == ("--tf_xla_auto_jit=2 --tf_xla_persistent_cache_directory="
                                          f"{(tmp_path / 'cache').resolve()}")
    assert not (tmp_path / "cache").exists()  # TensorFlow creates it when it first writes


def test_devices_are_taken_by_any_spelling_and_refused_when_tensorflow_has_none_such(monkeypatch):
    import tensorflow as tf

    cpu = tf.config.list_logical_devices("CPU")[0].name
    assert checked_devices(["/cpu:0"]) == checked_devices([" CPU:0"]) == [cpu]
    flag = lambda argument: "--" + argument  # as `vtx train` names it
    # MirroredStrategy itself would put a GPU it does not have on the CPU without a word, and
    # fails on a device named twice with an AssertionError.
    for devices, said in [(["/gpu:99"], "--devices: '/gpu:99' is not a device TensorFlow sees "
                                         "here (it sees /cpu:0"),
                          (["foo"], "--devices: 'foo' is not a device of this process (such as "
                                    "/gpu:0 or /cpu:0)"),
                          (["/cpu:0", ""], "--devices: '' is not a device of this process"),
                          (["/cpu:*"], "--devices: '/cpu:*' is not a device of this process"),
                          (["/job:worker/task:3/device:CPU:0"], "--devices: '/job:worker/task:3"),
                          (["/cpu:0", "/device:CPU:0"], "--devices names '/device:CPU:0' twice")]:
        with pytest.raises(ArgumentError) as refused:
            checked_devices(devices)
        assert refused.value.message(flag).startswith(said), devices
    monkeypatch.setenv("TF_CONFIG", cluster_config("chief", 0))
    with pytest.raises(ArgumentError, match="does not apply to a run of several workers"):
        make_strategy(["/cpu:0"])  # refused before any cluster is joined


def test_a_tf_config_tensorflow_would_fail_on_is_refused_naming_what_is_wrong():
    # What TensorFlow takes (checked against MultiWorkerMirroredStrategy) is taken.
    for text in [cluster_config("chief", 0), cluster_config("worker", 1), "{}",
                 '{"cluster": {"worker": ["h:1", "h:2"]}, "task": {"type": "worker", '
                 '"index": "1"}}',
                 '{"cluster": {"worker": {"0": "h:1"}}, "task": {"type": "worker", "index": 0}}',
                 '{"task": {"type": "worker", "index": "0"}}', '{"cluster": {}}']:
        check_tf_config(text)
    # TensorFlow's own: a JSONDecodeError without the variable's name, "The `task_id` 3 exceeds
    # the maximum id of worker.", an InvalidArgumentError traceback for a port.
    for text, said in [
            ("{bad", "TF_CONFIG is not JSON (Expecting property name"),
            ("[1]", "TF_CONFIG is not a JSON object: '[1]'"),
            ('{"cluster": {"worker": ["h:1"]}}', 'TF_CONFIG has no "task" naming this worker'),
            ('{"cluster": {"worker": "h:1"}, "task": {"type": "worker"}}',
             "TF_CONFIG: cluster 'worker' is not a list of host:port: 'h:1'"),
            ('{"cluster": {"worker": ["h:port"]}, "task": {"type": "worker", "index": 0}}',
             "TF_CONFIG: 'h:port' in cluster 'worker' is not host:port with a port from 1"),
            ('{"cluster": {"worker": ["h:\u00b2"]}, "task": {"type": "worker"}}',
             "TF_CONFIG: 'h:\u00b2' in cluster 'worker' is not host:port"),
            ('{"cluster": {"worker": ["h:1", "h:2"]}, "task": {"type": "worker", "index": 2}}',
             "TF_CONFIG: task {'type': 'worker', 'index': 2} is not one of the cluster's "
             "workers: worker 0-1 (vtx train runs chief and worker tasks only)"),
            ('{"cluster": {"worker": ["h:1"]}, "task": {"type": "evaluator", "index": 0}}',
             "TF_CONFIG: task {'type': 'evaluator', 'index': 0} is not one of the cluster's"),
            # vtx took these for worker 1 of one (an IndexError at the data positions).
            ('{"cluster": {"worker": ["127.0.0.1:1234"]}, "task": {"type": "worker", "index": 1}}',
             "TF_CONFIG: task {'type': 'worker', 'index': 1} is not one of the cluster's "
             "workers: worker 0 (vtx train"),
            ('{"cluster": {"worker": []}, "task": {"type": "worker", "index": 0}}',
             "TF_CONFIG: task {'type': 'worker', 'index': 0} is not one of the cluster's "
             "workers: it lists no worker or chief address"),
            ('{"task": {"type": "worker", "index": 1}}',
             "TF_CONFIG: task {'type': 'worker', 'index': 1} has no \"cluster\" of workers "
             "(without one TensorFlow runs this process as the only worker, index 0)"),
            ('{"cluster": {}, "task": {"type": "worker", "index": "2"}}',
             "TF_CONFIG: task {'type': 'worker', 'index': '2'} has no \"cluster\"")]:
        with pytest.raises(ValueError) as refused:
            check_tf_config(text)
        assert str(refused.value).startswith(said), (text, str(refused.value))


def in_fresh_process(code, tf_config):
    """`code` run by a new Python (MultiWorkerMirroredStrategy must be made before any other
    TensorFlow op) with TF_CONFIG set; the finished process."""
    env = dict(os.environ, TF_CONFIG=json.dumps(tf_config))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=REPO_ROOT, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=300)


def one_worker_cluster(port):
    return {"cluster": {"worker": [f"127.0.0.1:{port}"]}, "task": {"type": "worker", "index": 0}}


def test_a_sigterm_after_the_cluster_is_joined_still_ends_the_process():
    """MultiWorkerMirroredStrategy installs TensorFlow's SIGTERM handler, which only logs
    "SIGTERM caught": a SIGTERM during the trainer's start (before the loop's own handlers) would
    be swallowed. make_strategy puts Python's back (here the default: the process ends)."""
    process = in_fresh_process("""
        import os, signal, time
        from vtx.training.distribute import make_strategy

        make_strategy()
        print("joined", flush=True)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(20)  # the default handler ends the process long before
        print("SIGTERM swallowed", flush=True)
        """, one_worker_cluster(free_port()))
    assert "joined" in process.stdout, process.stdout
    assert process.returncode == -signal.SIGTERM, process.stdout[-3000:]


def test_a_worker_says_it_waits_for_its_peers_and_names_its_address_when_the_port_is_taken():
    """A worker whose peers never start waits for ever: it says so first. One whose port another
    process holds gets one line naming TF_CONFIG and the address, not TensorFlow's "Could not
    start gRPC server" traceback."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        peer = f"127.0.0.1:{free_port()}"
        process = in_fresh_process("""
            from vtx.training.distribute import make_strategy

            try:
                make_strategy(log=lambda line: print("log:", line, flush=True))
            except OSError as error:
                print(f"{type(error).__name__}: {error}", flush=True)
            """, {"cluster": {"worker": [peer, f"127.0.0.1:{port}"]},
                  "task": {"type": "worker", "index": 1}})
    lines = process.stdout.splitlines()
    assert (f"log: waiting for the other workers of TF_CONFIG (2 workers: {peer}, "
            f"127.0.0.1:{port}; this is worker 1, 127.0.0.1:{port})") in lines, process.stdout
    assert (f"OSError: TF_CONFIG: this worker (1, 127.0.0.1:{port}) cannot listen on port "
            f"{port} (TensorFlow: Could not start gRPC server): another process, such as a "
            f"worker of an earlier run, holds it; end it or give this worker a free port in "
            f"TF_CONFIG's cluster") in lines, process.stdout[-3000:]
    assert process.returncode == 0


def test_worker_addresses_are_in_topology_order_chief_first():
    tf_config = json.loads(cluster_config("worker", 1))
    assert worker_addresses(tf_config) == (["host0:2222", "host1:2222", "host2:2222"], 2)
    assert worker_addresses(json.loads(cluster_config("chief", 0)))[1] == 0
    assert worker_addresses({}) == ([], 0)


SLURM_STEP = {"SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "0", "SLURM_PROCID": "3",
              "SLURM_STEP_NUM_TASKS": "4", "SLURM_STEP_NODELIST": "gpu[07-08]",
              "SLURM_STEP_TASKS_PER_NODE": "2(x2)"}


def slurm_step(monkeypatch, **changes):
    for name, value in {**SLURM_STEP, **changes}.items():
        monkeypatch.setenv(name, value)


def test_a_slurm_step_resolves_to_the_tf_config_it_replaces(monkeypatch):
    """srun -N 2 --ntasks-per-node 2, task 3: four workers, two a node in node order, each on its
    node's port from 20000 + the job id; this one is the fourth."""
    from vtx.training.distribute import slurm_tf_config

    slurm_step(monkeypatch, CUDA_VISIBLE_DEVICES="")  # its GPUs set (none): none assigned
    tf_config, said = slurm_tf_config()
    assert tf_config == {"cluster": {"worker": ["gpu07:24242", "gpu07:24243", "gpu08:24242",
                                                "gpu08:24243"]},
                         "task": {"type": "worker", "index": 3}}
    check_tf_config(json.dumps(tf_config))
    assert worker_addresses(tf_config) == (tf_config["cluster"]["worker"], 3)
    assert said == ("Slurm job 4242 step 0: 4 workers (gpu07:24242, gpu07:24243, gpu08:24242, "
                    "gpu08:24243); this task is worker 3 (SLURM_PROCID 3), with no GPU set")
    monkeypatch.setenv("TF_CONFIG", json.dumps(tf_config))
    assert topology(SimpleNamespace(num_replicas_in_sync=4)) == Topology(3, 4, 1, False)


@pytest.mark.parametrize("job", ["11999", "12000", "19481", "987654"])
def test_slurm_workers_listen_below_the_ephemeral_ports_srun_takes(monkeypatch, job):
    """srun and slurmstepd listen on Linux's ephemeral ports (32768 on): a worker's port there
    could be theirs. Job 19481 once took 39481-39482 and its step hung."""
    from vtx.training.distribute import slurm_tf_config

    slurm_step(monkeypatch, CUDA_VISIBLE_DEVICES="", SLURM_JOB_ID=job, SLURM_STEP_NUM_TASKS="16",
               SLURM_STEP_NODELIST="cpu[1-2]", SLURM_STEP_TASKS_PER_NODE="8(x2)")
    tf_config, _ = slurm_tf_config()
    ports = [int(address.rpartition(":")[2]) for address in tf_config["cluster"]["worker"]]
    assert len(ports) == 16 and 20000 <= min(ports) and max(ports) < 32768


def test_a_slurm_task_gets_its_share_of_its_nodes_gpus(tmp_path, monkeypatch):
    from vtx.training.distribute import slurm_tf_config

    fake_nvidia_smi(tmp_path, "GPU 0: A\\nGPU 1: B\\nGPU 2: C\\nGPU 3: D\\n")
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    slurm_step(monkeypatch)
    _, said = slurm_tf_config()
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "2,3"  # the node's second task: GPUs 2 and 3
    assert said.endswith("this task is worker 3 (SLURM_PROCID 3), with GPUs 2,3 "
                         "(CUDA_VISIBLE_DEVICES)")
    fake_nvidia_smi(tmp_path, "GPU 0: A\\n")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    with pytest.raises(ValueError, match=r"this Slurm job step does not resolve into a cluster "
                                         r"of workers \(2 tasks on a node would share its 1 "
                                         r"GPUs; .*SLURM_PROCID='3'"):
        slurm_tf_config()


def test_one_slurm_task_or_none_is_no_cluster(monkeypatch):
    from vtx.training.distribute import slurm_tf_config

    slurm_step(monkeypatch, SLURM_STEP_NUM_TASKS="1", SLURM_PROCID="0")
    assert slurm_tf_config() is None
    monkeypatch.delenv("SLURM_PROCID")
    assert slurm_tf_config() is None
