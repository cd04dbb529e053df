import json
from types import SimpleNamespace

import pytest

from vtx.training.distribute import Topology, topology


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
