"""TensorFlow's start-up, without its chatter: the commands import TensorFlow and find its devices
through `import_tensorflow`, which holds back what TensorFlow's C++ side writes to standard error
meanwhile (oneDNN's notice, the CUDA stubs' "Could not find cuda drivers", "failed call to
cuInit" on a machine without a GPU). Those lines come before absl's logging is set up, so
TF_CPP_MIN_LOG_LEVEL does not silence them.

What is held back is written after all when the import fails (the reason is in it), and its
error lines are written whatever happens, but for those that only say there is no GPU
(`NO_GPU_LINES`): each decoding command's first line says where it runs. VTX_TF_LOG=1 lets
everything through, as TensorFlow writes it.

This module imports nothing of vtx's.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile

SHOW_ALL = "VTX_TF_LOG"  # set (and not 0): TensorFlow's start-up lines as they come
# absl's C++ log lines of level E (error) and F (fatal): `E0000 00:00:1796.5 4543 file.cc:52] ...`
ERROR_LINE = re.compile(r"[EF]\d{4} [\d:.]+ +\d+ \S+:\d+\] ")
# Errors that only say this machine has no usable GPU, which a CPU machine's every start writes.
NO_GPU_LINES = ("failed call to cuInit",)


def shown(variable: str = SHOW_ALL) -> bool:
    """Whether the user asked for TensorFlow's start-up lines (VTX_TF_LOG=1)."""
    return os.environ.get(variable, "").strip() not in ("", "0")


def import_tensorflow():
    """TensorFlow, imported and its devices listed, its start-up lines on standard error held
    back (see the module docstring). Listing the devices reads TF_XLA_FLAGS: set them first
    (`vtx.compile_cache.enable`). Returns the `tensorflow` module."""
    if "tensorflow" in sys.modules or shown():
        import tensorflow as tf

        tf.config.list_physical_devices()
        return tf
    with tempfile.TemporaryFile() as held:
        failed = True
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(held.fileno(), 2)
        try:
            import tensorflow as tf

            tf.config.list_physical_devices()
            failed = False
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            _write_back(held.read().decode("utf-8", "replace"), everything=failed)
    return tf


def _write_back(text: str, everything: bool) -> None:
    """Write `text`'s lines to standard error: all of them, or its errors that say more than
    that there is no GPU."""
    lines = text.splitlines(keepends=True) if everything else [
        line for line in text.splitlines(keepends=True)
        if ERROR_LINE.match(line) and not any(words in line for words in NO_GPU_LINES)]
    if lines:
        sys.stderr.write("".join(lines))
        sys.stderr.flush()
