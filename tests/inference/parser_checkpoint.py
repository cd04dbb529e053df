"""A random-weight parser checkpoint: a tiny Transformer and a vocabulary of sample words and trees.

Its outputs are arbitrary token sequences, which is what the repair path of `vtx parse` must turn
into well-formed trees; it is built in a second, unlike a trained model.
"""

import dataclasses
from pathlib import Path

import keras

from vtx.config import TINY
from vtx.data.vocab import train_sentencepiece
from vtx.models import transformer
from vtx.parsing.prepare import bracket_tokens, split_lines
from vtx import checkpoints

VOCAB_SIZE = 600


def write_random_parser(folder: Path, mrg_files: list[Path], seed: int = 0) -> Path:
    """Writes `folder/random.npz` (model, its config and vocabulary) and returns its path."""
    lines, _ = split_lines(mrg_files)
    words, targets = [line[0] for line in lines], [line[1] for line in lines]
    vocab = train_sentencepiece(iter(words + targets), folder / "spm.model", VOCAB_SIZE,
                                whole_words=bracket_tokens(targets))
    config = dataclasses.replace(TINY, vocab_size=vocab.size, max_positions=256)
    keras.utils.set_random_seed(seed)
    model = transformer.build(config)
    checkpoint = checkpoints.Checkpoint(
        model=[variable.numpy() for variable in model.variables], optimizer=[],
        meta={"step": 0, "model_config": config.to_dict()}, vocab=vocab.model_path.read_bytes())
    path = folder / "random.npz"
    checkpoints.save(path, checkpoint)
    return path
