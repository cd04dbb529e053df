"""PyTorch reference for `train_throughput.py`: the paper's Transformer built on `torch.nn`.

Shapes: B batch, S source length, T target length, D model width, V vocabulary.

Same architecture as vtx's `Transformer` (the paper, section 3): post-norm layers
(`norm_first=False`) with no final stack norm, one embedding matrix shared by source, target and
the pre-softmax projection, embeddings scaled by sqrt(D), sinusoidal positions, dropout on the
embedding sums and sub-layer outputs; label-smoothed cross entropy over non-pad tokens; Adam(0.9,
0.98, 1e-9) on the paper's schedule. This module imports torch at the top: `train_throughput.py`
imports it only inside the reference's worker process, so vtx never depends on torch.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

PAD_ID = 0  # vtx.config.PAD_ID, repeated so this process never imports TensorFlow


def sinusoidal_positions(length: int, width: int) -> torch.Tensor:
    """[length, width] PE(pos, 2i) = sin(pos / 10000^(2i/D)), PE(pos, 2i+1) = cos(...)."""
    positions = torch.arange(length, dtype=torch.float32)[:, None]
    dims = torch.arange(width)
    inv_freq = torch.exp(-math.log(10000.0) * (2 * (dims // 2)).float() / width)
    angles = positions * inv_freq[None, :]
    return torch.where(dims % 2 == 0, torch.sin(angles), torch.cos(angles))


class Transformer(nn.Module):
    """Encoder-decoder Transformer with a shared, scaled embedding (paper section 3).

    Args:
        vocab_size, num_layers, d_model, d_ff, num_heads, dropout: as in `vtx.config.ModelConfig`.
    """

    def __init__(self, vocab_size: int, num_layers: int, d_model: int, d_ff: int, num_heads: int,
                 dropout: float, layer_norm_epsilon: float = 1e-6, max_positions: int = 1024):
        super().__init__()
        self.d_model = d_model
        self.embedding = nn.Embedding(vocab_size, d_model, padding_idx=None)
        nn.init.normal_(self.embedding.weight, std=d_model**-0.5)
        self.register_buffer("positions", sinusoidal_positions(max_positions, d_model))
        self.dropout = nn.Dropout(dropout)
        layer_args = dict(d_model=d_model, nhead=num_heads, dim_feedforward=d_ff, dropout=dropout,
                          layer_norm_eps=layer_norm_epsilon, batch_first=True, norm_first=False)
        # norm=None: post-norm stacks have no final LayerNorm (nn.Transformer would add one).
        self.encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(**layer_args), num_layers,
                                             norm=None, enable_nested_tensor=False)
        self.decoder = nn.TransformerDecoder(nn.TransformerDecoderLayer(**layer_args), num_layers,
                                             norm=None)

    def _embed(self, ids: torch.Tensor) -> torch.Tensor:
        """[B, T] ids -> [B, T, D]: sqrt(D)-scaled embeddings + positions, then dropout."""
        vectors = self.embedding(ids) * math.sqrt(self.d_model)
        return self.dropout(vectors + self.positions[: ids.shape[1]])

    def forward(self, source: torch.Tensor, target_in: torch.Tensor) -> torch.Tensor:
        """source [B, S], target_in [B, T] -> logits [B, T, V]."""
        source_pad = source == PAD_ID  # [B, S], True = ignore (torch's convention)
        memory = self.encoder(self._embed(source), src_key_padding_mask=source_pad)
        length = target_in.shape[1]
        causal = nn.Transformer.generate_square_subsequent_mask(length, device=target_in.device)
        hidden = self.decoder(self._embed(target_in), memory, tgt_mask=causal, tgt_is_causal=True,
                              memory_key_padding_mask=source_pad)
        return F.linear(hidden, self.embedding.weight)


def paper_learning_rate(step: int, d_model: int, warmup_steps: int = 4000) -> float:
    """d_model^-0.5 * min(step^-0.5, step * warmup^-1.5), step counted from 1 (section 5.3)."""
    step = max(step, 1)
    return d_model**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)


def make_step(model: Transformer, label_smoothing: float, bfloat16: bool,
              warmup_steps: int = 4000, fused: bool = False, read_loss: bool = True):
    """A function `batch -> loss_sum` doing forward, backward and one Adam update.

    Args:
        model: the reference model (in training mode), on the CPU or a GPU.
        label_smoothing: epsilon_ls; torch spreads it over all V tokens, the label included, as vtx.
        bfloat16: run the forward pass under bfloat16 autocast on the model's device (weights
            stay float32).
        warmup_steps: of the paper's schedule.
        fused: `torch.optim.Adam(fused=True)` (one kernel for every parameter; GPU).
        read_loss: return the loss as a float (waits for the update); else as a device tensor,
            so that updates on a GPU run back to back.
    """
    device = next(model.parameters()).device.type
    optimizer = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9,
                                 fused=fused or None)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda index: paper_learning_rate(index + 1, model.d_model, warmup_steps))

    def step(batch: dict) -> float:
        target = batch["target_out"]
        with torch.autocast(device, dtype=torch.bfloat16, enabled=bfloat16):
            logits = model(batch["source"], batch["target_in"])
        loss_sum = F.cross_entropy(logits.float().flatten(0, 1), target.flatten(),
                                   ignore_index=PAD_ID, label_smoothing=label_smoothing,
                                   reduction="sum")
        tokens = (target != PAD_ID).sum().clamp(min=1)
        optimizer.zero_grad(set_to_none=True)
        (loss_sum / tokens).backward()
        optimizer.step()
        schedule.step()
        return float(loss_sum.detach()) if read_loss else loss_sum.detach()

    return step


def build(model_config: dict, threads: int, seed: int = 1) -> Transformer:
    """The reference model for a `ModelConfig.to_dict()`, in training mode."""
    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    keys = ("vocab_size", "num_layers", "d_model", "d_ff", "num_heads", "dropout",
            "layer_norm_epsilon", "max_positions")
    return Transformer(**{k: model_config[k] for k in keys}).train()


def to_tensors(batch: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
    """int32 numpy batch -> int64 torch tensors (what embedding and cross_entropy take)."""
    return {k: torch.from_numpy(v).long() for k, v in batch.items()}
