"""vtx's own lines of a command's standard error, without TensorFlow's."""

import re

# TensorFlow's C++ log (absl's `I0000 00:00:1796407350.121440    5468 port.cc:153] ...` lines
# and the one that announces them), which TF_CPP_MIN_LOG_LEVEL does not silence.
TENSORFLOW_LINE = re.compile(r"[IWEF]\d{4} [\d:.]+ +\d+ \S+:\d+\] |WARNING: All log messages "
                             r"before absl::")


def vtx_lines(stderr: str) -> list[str]:
    """The lines of `stderr` that vtx wrote, in order."""
    return [line for line in stderr.splitlines() if not TENSORFLOW_LINE.match(line)]
