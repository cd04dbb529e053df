"""Inference: beam search (knows the model only through decode_step) and translation."""
