"""vtx: the Transformer of "Attention Is All You Need" (Vaswani et al., 2017) on Keras 3 + TensorFlow.

Importing vtx selects the TensorFlow backend for Keras unless the user already chose one, and turns
on TensorFlow's oneDNN CPU kernels on every x86-64 CPU (below); both must happen before TensorFlow
and Keras are first imported, so they are done here, at the top of the package.
"""

import os
import platform

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
# TensorFlow's C++ start-up chatter; warnings and errors still show.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
# TensorFlow turns its oneDNN kernels on by itself only on x86 CPUs with AVX512_VNNI, AVX_VNNI,
# AVX512_BF16 or AMX; on the others (AVX2 only, or AVX-512 without VNNI) it falls back to Eigen's,
# which trains vtx's models slower than oneDNN there (`benchmarks/train_throughput.py` with
# TF_ENABLE_ONEDNN_OPTS=0 and =1, docs/benchmarks.md). TF_ENABLE_ONEDNN_OPTS=0 in the
# environment keeps Eigen's.
if platform.machine().lower() in ("x86_64", "amd64"):
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")

__version__ = "0.1.0"
