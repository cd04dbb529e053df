"""Importing vtx prepares TensorFlow's environment (vtx/__init__.py)."""

import os
import platform
import subprocess
import sys

import pytest

# What TensorFlow decided, read in a fresh process that imports vtx first, as every vtx entry does.
# The variable is read too: on a CPU where TensorFlow turns oneDNN on by itself (VNNI, bf16, AMX)
# its verdict alone would not show whether vtx asked for it.
REPORT_ONEDNN = ("import os, vtx, tensorflow\n"
                 "from tensorflow.python.util import _pywrap_util_port\n"
                 "print('oneDNN', _pywrap_util_port.IsMklEnabled(),"
                 " os.environ.get('TF_ENABLE_ONEDNN_OPTS'))\n")


def onednn_after_importing_vtx(**environment: str) -> tuple[bool, str]:
    """Whether TensorFlow runs oneDNN's kernels in a process that imported vtx first, and
    TF_ENABLE_ONEDNN_OPTS as that process saw it after the import."""
    env = {name: value for name, value in os.environ.items() if name != "TF_ENABLE_ONEDNN_OPTS"}
    env.update(environment, TF_CPP_MIN_LOG_LEVEL="3")
    result = subprocess.run([sys.executable, "-c", REPORT_ONEDNN], env=env, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    label, enabled, variable = result.stdout.strip().splitlines()[-1].split()
    assert label == "oneDNN" and enabled in ("True", "False"), result.stdout
    return enabled == "True", variable


@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"),
                    reason="TensorFlow's oneDNN default is set on x86-64 only")
def test_importing_vtx_turns_onednn_on_unless_the_user_turned_it_off():
    # On a CPU with AVX2 only TensorFlow alone would leave oneDNN off (Eigen's kernels).
    assert onednn_after_importing_vtx() == (True, "1")
    assert onednn_after_importing_vtx(TF_ENABLE_ONEDNN_OPTS="0") == (False, "0")
