"""Sinusoidal positional encoding (paper section 3.5).

Shapes: B batch, T length, D model width.
"""

import math

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="vtx")
class SinusoidalPositionEncoding(keras.layers.Layer):
    """PE(pos, 2i) = sin(pos / 10000^(2i/D)), PE(pos, 2i+1) = cos(pos / 10000^(2i/D)).

    The angles are computed in float32 whatever the compute dtype (in bfloat16, `pos` itself loses
    precision past 256), then cast. The layer has no weights.

    With layout "sines_then_cosines" (Marian's) dimension i < D / 2 holds sin(pos / 10000^(2i/D))
    and D / 2 + i the cosine of the same angle, computed in float64 as Transformers'
    `MarianSinusoidalPositionalEmbedding` computes its table, then cast, so that the encodings
    are Marian's to the bit.

    Args:
        max_wavelength: the 10000 of the formula.
        layout: "interleaved" or "sines_then_cosines" (`vtx.config.POSITION_LAYOUTS`).
    """

    def __init__(self, max_wavelength: float = 10000.0, layout: str = "interleaved", **kwargs):
        super().__init__(**kwargs)
        if layout not in ("interleaved", "sines_then_cosines"):
            raise ValueError(f"layout must be interleaved or sines_then_cosines, got {layout!r}")
        self.max_wavelength, self.layout = max_wavelength, layout

    def call(self, inputs, start_index=0, positions=None):
        """Encodings for positions start_index .. start_index + T - 1, or for `positions`.

        Args:
            inputs: [B, T, D] embeddings; only the shape is used.
            start_index: position of the first element (a scalar, may be a tensor in decoding).
            positions: int [B, T], each element's own position, all below T (packed rows, where
                each pair's positions restart at 0); overrides start_index.

        Returns:
            [T, D] encodings in the layer's compute dtype, to be broadcast over B; [B, T, D]
            with `positions` (rows of the [T, D] table).
        """
        if positions is not None:
            return ops.take(self.call(inputs), positions, axis=0)
        length, width = ops.shape(inputs)[1], inputs.shape[-1]
        if self.layout == "sines_then_cosines":
            return self._sines_then_cosines(length, width, start_index)
        positions = ops.cast(ops.arange(length) + start_index, "float32")  # [T]
        dims = ops.arange(width)  # [D]
        exponent = ops.cast(2 * (dims // 2), "float32") / float(width)
        inv_freq = ops.exp(-math.log(self.max_wavelength) * exponent)  # [D]: 10000^(-2i/D)
        angles = positions[:, None] * inv_freq[None, :]  # [T, D]
        encoding = ops.where(dims % 2 == 0, ops.sin(angles), ops.cos(angles))
        return ops.cast(encoding, self.compute_dtype)

    def _sines_then_cosines(self, length, width: int, start_index):
        """[T, D]: pos / 10000^(2 (j // 2) / D) for the even j as sines, the odd j as cosines."""
        positions = ops.cast(ops.arange(length) + start_index, "float64")  # [T]
        dims = ops.arange(0, width, 2)  # [D / 2]: the even j; an odd j + 1 shares its angle
        wavelengths = ops.power(ops.cast(self.max_wavelength, "float64"),
                                ops.cast(dims, "float64") / float(width))
        angles = positions[:, None] / wavelengths[None, :]  # [T, D / 2]
        encoding = ops.concatenate([ops.sin(angles), ops.cos(angles)], axis=-1)  # [T, D]
        return ops.cast(ops.cast(encoding, "float32"), self.compute_dtype)

    def compute_output_shape(self, input_shape):
        return (input_shape[1], input_shape[2])

    def get_config(self):
        return {**super().get_config(), "max_wavelength": self.max_wavelength,
                "layout": self.layout}
