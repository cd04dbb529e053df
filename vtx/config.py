"""Configuration: frozen dataclasses and the paper's named presets (paper section 3, Table 3).

Special token ids are fixed for every vocabulary vtx builds or accepts (SentencePiece is trained with
these ids): pad 0, unk 1, bos 2, eos 3.
"""

from __future__ import annotations

import dataclasses
import json
import math
import numbers
import os
from pathlib import Path

from vtx.errors import ArgumentError

PAD_ID = 0
UNK_ID = 1
BOS_ID = 2
EOS_ID = 3


class _JsonConfig:
    """Dictionary and JSON round trips shared by the configuration dataclasses."""

    _KIND = "configuration"  # names the dataclass in error messages

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict):
        """Build from a dict; unknown keys are refused by name."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown {cls._KIND} keys: {', '.join(unknown)}")
        return cls(**values)

    def save(self, path: str | Path) -> None:
        """Write as JSON atomically (temp file, then rename)."""
        from vtx import atomic

        atomic.write_text(path, json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n")

    @classmethod
    def load(cls, path: str | Path):
        return cls.from_dict(json.loads(Path(path).read_text()))


_SIZES = ("vocab_size", "num_layers", "d_model", "d_ff", "num_heads", "max_positions")
_RATES = ("dropout", "attention_dropout", "relu_dropout")
ACTIVATIONS = ("relu", "swish", "gelu")  # swish: x * sigmoid(x); gelu: the exact (erf) GELU
# "interleaved": PE(pos, 2i) = sin, PE(pos, 2i + 1) = cos (the paper's formula, vtx's own);
# "sines_then_cosines": the D / 2 sines, then the D / 2 cosines (Marian's, OPUS-MT's).
POSITION_LAYOUTS = ("interleaved", "sines_then_cosines")
# Model fields a configuration written before them lacks; it means their defaults.
ADDED_FIELDS = ("activation", "scale_embedding", "position_layout", "final_logits_bias")


@dataclasses.dataclass(frozen=True)
class ModelConfig(_JsonConfig):
    """Shape and regularisation of an encoder-decoder Transformer (paper section 3)."""

    _KIND = "model configuration"

    vocab_size: int = 37000  # joint source-target vocabulary; one shared embedding matrix
    num_layers: int = 6  # N, identical layers in each of the encoder and decoder stacks
    d_model: int = 512  # model width: embeddings, every sub-layer output
    d_ff: int = 2048  # inner width of the position-wise feed-forward network
    num_heads: int = 8  # h; d_k = d_v = d_model / h
    dropout: float = 0.1  # P_drop: sub-layer outputs and embedding+position sums
    attention_dropout: float = 0.0  # on attention weights (paper: none)
    relu_dropout: float = 0.0  # inside the FFN, after the ReLU (paper: none)
    max_positions: int = 1024  # longest sequence (source or target) the model accepts
    layer_norm_epsilon: float = 1e-6
    # ADDED_FIELDS (for imported models, `vtx.imports`): at their defaults, the paper's model
    # as vtx always built it, they are left out of `to_dict`, so that a checkpoint or
    # config.json written before them reads, resumes and compares as the same configuration.
    activation: str = "relu"  # of the FFN's inner layer: one of ACTIVATIONS
    scale_embedding: bool = True  # embeddings times sqrt(D) before the positions are added
    position_layout: str = "interleaved"  # where the sines and cosines lie: POSITION_LAYOUTS
    # A learned bias [V] added to the logits (Marian's output layer has one): one more model
    # variable, the embedding's second.
    final_logits_bias: bool = False

    def __post_init__(self) -> None:
        # Types first: a configuration read from a file (a checkpoint's, config.json) may hold
        # anything, and each check after them compares numbers.
        for name in _SIZES:
            value = getattr(self, name)
            if not isinstance(value, numbers.Integral) or isinstance(value, bool):
                raise ValueError(f"{name} must be an integer, got {value!r}")
            if value <= 0:
                raise ValueError(f"{name} must be positive, got {value}")
        for name in _RATES + ("layer_norm_epsilon",):
            value = getattr(self, name)
            if (not isinstance(value, numbers.Real) or isinstance(value, bool)
                    or not math.isfinite(value)):
                raise ValueError(f"{name} must be a finite number, got {value!r}")
        for name in _RATES:
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"{name} must be in [0, 1), got {getattr(self, name)}")
        if self.layer_norm_epsilon <= 0:
            raise ValueError(f"layer_norm_epsilon must be positive, got {self.layer_norm_epsilon}")
        if self.d_model % self.num_heads:  # an ArgumentError: `vtx train` names its flags
            raise ArgumentError("{d_model} ({width}) must be divisible by {num_heads} ({heads})",
                                width=self.d_model, heads=self.num_heads)
        if self.vocab_size <= EOS_ID:
            raise ValueError(f"vocab_size must exceed the {EOS_ID + 1} special ids")
        self._check_choices()

    def _check_choices(self) -> None:
        for name, choices in (("activation", ACTIVATIONS), ("position_layout", POSITION_LAYOUTS)):
            if getattr(self, name) not in choices:
                raise ValueError(f"{name} must be one of {', '.join(choices)}, "
                                 f"got {getattr(self, name)!r}")
        for name in ("scale_embedding", "final_logits_bias"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, got {getattr(self, name)!r}")
        if self.position_layout == "sines_then_cosines" and self.d_model % 2:
            raise ValueError(f"position_layout sines_then_cosines needs an even d_model, "
                             f"got {self.d_model}")

    def to_dict(self) -> dict:
        """The fields, those of `ADDED_FIELDS` only where they differ from their default."""
        defaults = {f.name: f.default for f in dataclasses.fields(self) if f.name in ADDED_FIELDS}
        return {key: value for key, value in dataclasses.asdict(self).items()
                if key not in defaults or value != defaults[key]}

    @property
    def parameter_count(self) -> int:
        """The model's weights: the shared embedding, then per encoder and decoder layer its
        attention projections, feed-forward network and layer norms, with their biases."""
        d, inner = self.d_model, self.d_ff
        attention = 4 * (d * d + d)
        feed_forward = 2 * d * inner + inner + d
        encoder = attention + feed_forward + 2 * 2 * d
        decoder = 2 * attention + feed_forward + 3 * 2 * d
        bias = self.vocab_size if self.final_logits_bias else 0
        return self.vocab_size * d + bias + self.num_layers * (encoder + decoder)

    @property
    def head_dim(self) -> int:
        """d_k = d_v = d_model / h."""
        return self.d_model // self.num_heads


def check_fits_in_memory(model_config: ModelConfig, where: str = "the model") -> None:
    """Refuse a model whose float32 weights alone exceed this machine's memory, before anything
    allocates them (TensorFlow would fail deep inside, or take minutes building it).

    Raises:
        ValueError: the weights' size and the memory, in GiB, with `where` the model came from.
    """
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # not a POSIX system: nothing to compare
        return
    weights = 4 * model_config.parameter_count
    if weights > memory:
        raise ValueError(f"{where} has {model_config.parameter_count:,} parameters: "
                         f"{weights / 2**30:,.1f} GiB of float32 weights, more than this "
                         f"machine's {memory / 2**30:,.1f} GiB of memory")


BASE = ModelConfig()
BIG = dataclasses.replace(BASE, d_model=1024, d_ff=4096, num_heads=16, dropout=0.3)
# Section 6.3: 4 layers, d_model 1024; dropout is tuned on WSJ section 22, 0.3 as a starting point.
PARSE_BIG = dataclasses.replace(BIG, num_layers=4, vocab_size=16000)
TINY = dataclasses.replace(BASE, num_layers=2, d_model=64, d_ff=128, num_heads=4, vocab_size=1000)

PRESETS: dict[str, ModelConfig] = {"base": BASE, "big": BIG, "parse-big": PARSE_BIG, "tiny": TINY}


def preset(name: str, **overrides) -> ModelConfig:
    """Return the named preset with `overrides` applied (None values are ignored).

    Raises:
        KeyError: `name` is not a preset; the message lists the known ones.
    """
    if name not in PRESETS:
        raise KeyError(f"unknown arch {name!r}; choose one of: {', '.join(PRESETS)}")
    changes = {k: v for k, v in overrides.items() if v is not None}
    return dataclasses.replace(PRESETS[name], **changes)


# "auto": mixed_bfloat16 where the hardware computes bfloat16 natively, else float32
# (vtx.training.precision); resolved when training starts, and recorded resolved.
PRECISIONS = ("auto", "float32", "mixed_float16", "mixed_bfloat16")
BEST_CHECKPOINT_METRICS = ("loss", "bleu", "f1")


@dataclasses.dataclass(frozen=True)
class TrainConfig(_JsonConfig):
    """How to train (paper section 5). A "step" is one optimizer update."""

    _KIND = "training configuration"

    max_tokens: int = 4096  # per replica and micro-batch, source and target each, padding counted
    update_freq: int = 1  # micro-batches accumulated per update (gradient accumulation)
    max_steps: int = 100_000
    max_minutes: float = 0.0  # wall-time budget of this process: stop, save, exit 0; 0 disables
    warmup_steps: int = 4000
    lr_scale: float = 1.0  # multiplier on d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)
    # Over this last fraction of the budget (--max-steps, or --max-minutes where that ends
    # first) the rate falls linearly to 0 (`vtx.training.loop`'s cooldown window); 0: none.
    cooldown: float = 0.0
    adam_beta_1: float = 0.9
    adam_beta_2: float = 0.98
    adam_epsilon: float = 1e-9
    label_smoothing: float = 0.1  # epsilon_ls
    seed: int = 1
    precision: str = "float32"  # auto | float32 | mixed_float16 | mixed_bfloat16
    jit_compile: bool = False  # XLA on the per-replica gradient function (helps on GPU)
    # Batch shapes compiled at once before the first update (XLA compiles each on one CPU
    # core); 0: `trainer.compile_workers`' choice from the cores and replicas.
    compile_workers: int = 0
    # Distinct padded batch lengths (each one compiled program under XLA); 0: 8 under XLA, 16
    # without (`pipeline.shape_policy`). Fewer compile sooner and pad more.
    max_shapes: int = 0
    # Training batches of several pairs per row, in one or two shapes (`vtx.data.packing`),
    # instead of length buckets: fewer compiled programs, fewer pad positions. None: with XLA where the
    # data's packed rows cost fewer FLOPs an epoch (`packing.relative_cost`), else buckets.
    pack: bool | None = None
    save_interval_minutes: float = 10.0  # the paper's checkpoint cadence; 0 disables
    save_interval_steps: int = 0  # 0 disables
    keep_last: int = 0  # keep this many newest checkpoints; 0 keeps all
    validate_interval_steps: int = 1000  # 0 disables
    log_interval_steps: int = 100
    max_nonfinite_in_a_row: int = 10  # stop after this many consecutive non-finite losses
    max_diverged_in_a_row: int = 10  # ... or losses far above their running mean (loop.py)
    # checkpoint_best keeps the best validation by this: "loss" (lowest), or a task metric
    # computed at each validation, "bleu" or "f1" (highest; vtx.training.validation).
    best_checkpoint_metric: str = "loss"
    patience: int = 0  # stop after this many validations without a new best; 0 disables
    # An exponential moving average of the weights, kept on the devices and in every
    # checkpoint (`vtx.training.ema`): after update t, ema = d * ema + (1 - d) * weights, with d
    # this decay, or 0 (the EMA follows the weights) for t <= `ema_start_step`. None: no EMA.
    ema_decay: float | None = None
    ema_start_step: int = 0
    validate_ema: bool = False  # validations (loss and task metric) score the EMA's weights
    # Subword regularization (`vtx.data.subword`): each epoch the training text is segmented
    # anew, sampled with this alpha (a BPE vocabulary: BPE-dropout's probability of dropping a
    # merge, in (0, 1]; unigram: Kudo's smoothing exponent). None: the preprocessed ids.
    subword_alpha: float | None = None
    # With a unigram vocabulary: sample among this many best segmentations (>= 2); None: all.
    subword_nbest: int | None = None

    def __post_init__(self) -> None:
        positive = ("max_tokens", "update_freq", "max_steps", "warmup_steps", "log_interval_steps",
                    "max_nonfinite_in_a_row", "max_diverged_in_a_row")
        for name in positive:
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        for name in ("save_interval_steps", "keep_last", "validate_interval_steps", "max_minutes",
                     "patience", "compile_workers", "max_shapes"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, "
                             f"got {self.precision!r}")
        if not 0.0 <= self.label_smoothing < 1.0:
            raise ValueError(f"label_smoothing must be in [0, 1), got {self.label_smoothing}")
        if self.best_checkpoint_metric not in BEST_CHECKPOINT_METRICS:
            raise ValueError(f"best_checkpoint_metric must be one of "
                             f"{', '.join(BEST_CHECKPOINT_METRICS)}, got "
                             f"{self.best_checkpoint_metric!r}")
        if self.lr_scale <= 0:
            raise ValueError(f"lr_scale must be positive, got {self.lr_scale}")
        if not 0.0 <= self.cooldown < 1.0:
            raise ValueError(f"cooldown must be in [0, 1), got {self.cooldown}")
        if self.ema_decay is not None and not 0.0 <= self.ema_decay < 1.0:
            raise ValueError(f"ema_decay must be in [0, 1), got {self.ema_decay}")
        if self.ema_decay is None and (self.ema_start_step or self.validate_ema):
            raise ValueError("ema_start_step and validate_ema need an EMA (ema_decay)")
        if self.ema_start_step < 0:
            raise ValueError(f"ema_start_step must be >= 0, got {self.ema_start_step}")
        self._check_subword()

    def _check_subword(self) -> None:
        """The sampling's settings; the vocabulary's type bounds them further
        (`vtx.data.subword.check_sampling`: alpha <= 1 and no nbest for BPE)."""
        if self.subword_alpha is not None and not (0.0 < self.subword_alpha < math.inf):
            raise ValueError(f"subword_alpha must be positive, got {self.subword_alpha}")
        if self.subword_nbest is not None and self.subword_alpha is None:
            raise ValueError("subword_nbest needs subword sampling (subword_alpha)")
        if self.subword_nbest is not None and self.subword_nbest < 2:
            raise ValueError(f"subword_nbest must be >= 2, got {self.subword_nbest}")

