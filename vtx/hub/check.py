"""Whether a keras-hub preset directory is whole, before keras-hub reads it: the one check that
`vtx.hub.load_preset` and keras-hub's own `from_preset` (through `TransformerTokenizer`) make.
"""

from __future__ import annotations

import json
from pathlib import Path

from vtx import manifest

# The preset's configuration files (keras-hub's save_to_preset) and its weights.
CONFIG_FILES = ("config.json", "task.json", "preprocessor.json", "tokenizer.json",
                "metadata.json")
WEIGHTS_FILE = "model.weights.h5"


def check_preset(directory: str | Path) -> None:
    """Refuse a preset directory that is not whole: a file changed, missing or added since it
    was exported, or a link leaving it (`vtx.manifest`), a configuration file that does not
    parse, or no weights. keras-hub would read on, or fail in words that do not name the file
    (a bare JSONDecodeError; "model.weights.json" for missing weights).

    Raises:
        ManifestError: the file, named with the reason.
    """
    from vtx.errors import ManifestError

    directory = Path(directory)
    manifest.verify(directory)
    for name in CONFIG_FILES + (WEIGHTS_FILE,):
        if not (directory / name).is_file():
            raise ManifestError(f"{directory / name} is missing: {directory} is not a whole "
                                f"keras-hub preset; export it again")
    for name in CONFIG_FILES:
        try:
            json.loads((directory / name).read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError) as error:
            raise ManifestError(f"{directory / name}: not readable as JSON ({error}): damaged; "
                                f"export it again") from None


