"""Models trained elsewhere, read into vtx checkpoints: `vtx import`.

One format: a Hugging Face Transformers MarianMT folder (OPUS-MT's models;
`vtx.imports.marian`). The checkpoint is written as every vtx checkpoint is (checksummed,
atomically), only once the whole folder has been read and checked.
"""

from __future__ import annotations

from pathlib import Path

FORMATS = ("marian",)


def import_model(directory: str | Path, output: str | Path, force: bool = False,
                 require_safetensors: bool = False) -> dict:
    """Read the model folder `directory` and write it as the vtx checkpoint `output`.

    Args:
        directory: a MarianMT folder (config.json, model.safetensors or pytorch_model.bin,
            source.spm, target.spm, vocab.json).
        output: the checkpoint file to write (not a numbered training checkpoint's name).
        force: replace an existing file at `output`.
        require_safetensors: refuse a folder whose weights are pytorch_model.bin alone (a
            pickle, read with `weights_only=True` otherwise).

    Returns:
        What was read: {"format", "parameters", "vocab_size", "model_config"}.

    Raises:
        DataError: the folder is not one vtx represents exactly (file, field and value named).
        ValueError: `output` is in the way (`checkpoints.check_output`).
        OutputLockedError: another process writes `output` (`vtx.locking`).
    """
    from vtx import checkpoints, locking
    from vtx.imports.marian import read_marian_folder

    with locking.output_lock(output, "--output"):  # checked and written by one process
        checkpoints.check_output(output, force)
        checkpoint = read_marian_folder(directory, require_safetensors)
        checkpoints.save(output, checkpoint)
    config = checkpoints.model_config(checkpoint, output)
    return {"format": "marian", "parameters": config.parameter_count,
            "vocab_size": config.vocab_size, "model_config": config.to_dict()}
