"""vtx: the Transformer of "Attention Is All You Need" (Vaswani et al., 2017) on Keras 3 + TensorFlow.

Importing vtx selects the TensorFlow backend for Keras unless the user already chose one; this must
happen before keras is first imported, so it is done here, at the top of the package.
"""

import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
# TensorFlow's C++ start-up chatter; warnings and errors still show.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")

__version__ = "0.1.0"
