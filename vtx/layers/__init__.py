"""Keras 3 layers of the Transformer (paper section 3), one public layer per module.

Shape legend used in every module: B batch, S source length, T target length, D model width
(d_model), H heads, K head width (d_k = d_v = D / H), F feed-forward width (d_ff), V vocabulary.
"""

from vtx.layers.attention import MultiHeadAttention
from vtx.layers.decoder import DecoderLayer
from vtx.layers.embedding import SharedEmbedding
from vtx.layers.encoder import EncoderLayer
from vtx.layers.feed_forward import FeedForward
from vtx.layers.positional import SinusoidalPositionEncoding

__all__ = [
    "DecoderLayer",
    "EncoderLayer",
    "FeedForward",
    "MultiHeadAttention",
    "SharedEmbedding",
    "SinusoidalPositionEncoding",
]
