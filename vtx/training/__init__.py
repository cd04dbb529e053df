"""Training: learning-rate schedule, label-smoothed loss, the distributed custom loop, checkpoints and averaging."""
