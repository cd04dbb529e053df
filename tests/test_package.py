"""Importing vtx prepares TensorFlow's environment (vtx/__init__.py)."""

import os
import platform
import subprocess
import sys

import pytest

# What TensorFlow decided, read in a fresh process that imports vtx first, as every vtx entry does.
REPORT_ONEDNN = ("import vtx, tensorflow\n"
                 "from tensorflow.python.util import _pywrap_util_port\n"
                 "print('oneDNN', _pywrap_util_port.IsMklEnabled())\n")


def onednn_on_after_importing_vtx(**environment: str) -> bool:
    """Whether TensorFlow runs oneDNN's kernels in a process that imported vtx first."""
    env = {name: value for name, value in os.environ.items() if name != "TF_ENABLE_ONEDNN_OPTS"}
    env.update(environment, TF_CPP_MIN_LOG_LEVEL="3")
    result = subprocess.run([sys.executable, "-c", REPORT_ONEDNN], env=env, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    line = result.stdout.strip().splitlines()[-1]
    assert line in ("oneDNN True", "oneDNN False"), result.stdout
    return line == "oneDNN True"


@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"),
                    reason="TensorFlow's oneDNN default is set on x86-64 only")
def test_importing_vtx_turns_onednn_on_unless_the_user_turned_it_off():
    # On a CPU with AVX2 only TensorFlow alone would leave oneDNN off (Eigen's kernels).
    assert onednn_on_after_importing_vtx()
    assert not onednn_on_after_importing_vtx(TF_ENABLE_ONEDNN_OPTS="0")
