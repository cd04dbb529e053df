"""Joint source-target SentencePiece vocabulary (SPEC.md "Training": shared BPE vocabulary).

Every model vtx trains or accepts has the fixed special ids of `vtx.config`: pad 0 (`<pad>`),
unk 1 (`<unk>`), bos 2 (`<s>`), eos 3 (`</s>`). Encoded sentences carry no bos/eos; the input
pipeline adds them.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import sentencepiece as spm

from vtx.config import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from vtx.data.text import DataError

MODEL_TYPES = ("bpe", "unigram")
# SentencePiece's whitespace marker; a piece that starts with it begins a word.
WORD_BOUNDARY = "\u2581"
SPECIAL_IDS = {"pad": PAD_ID, "unk": UNK_ID, "bos": BOS_ID, "eos": EOS_ID}


class Vocabulary:
    """A SentencePiece model with vtx's special ids: text <-> token ids.

    Args:
        model_path: a SentencePiece `.model` file.

    Raises:
        DataError: the file cannot be loaded, or its special ids differ from `SPECIAL_IDS`.
    """

    def __init__(self, model_path: str | Path):
        self.model_path = Path(model_path)
        self._load(lambda processor: processor.Load(str(self.model_path)), str(self.model_path))

    @classmethod
    def from_bytes(cls, model: bytes, name: str) -> "Vocabulary":
        """A vocabulary from a serialized SentencePiece model (e.g. carried by a checkpoint);
        `name` says where it came from in messages. Its `model_path` is None.

        Raises:
            DataError: as the constructor.
        """
        vocab = cls.__new__(cls)
        vocab.model_path = None
        vocab._load(lambda processor: processor.LoadFromSerializedProto(model), name)
        return vocab

    def _load(self, load, name: str) -> None:
        self._processor = spm.SentencePieceProcessor()
        try:
            load(self._processor)
        except (OSError, RuntimeError) as err:
            raise DataError(f"cannot load SentencePiece model {name}: {err}") from None
        found = {"pad": self._processor.pad_id(), "unk": self._processor.unk_id(),
                 "bos": self._processor.bos_id(), "eos": self._processor.eos_id()}
        if found != SPECIAL_IDS:
            raise DataError(f"SentencePiece model {name} has special ids {found}; "
                            f"vtx needs {SPECIAL_IDS} (train with pad_id=0 unk_id=1 bos_id=2 "
                            f"eos_id=3)")

    @property
    def size(self) -> int:
        """Number of ids, special ones included."""
        return self._processor.get_piece_size()

    def encode(self, text: str) -> list[int]:
        """One sentence -> its piece ids (no bos/eos)."""
        return self._processor.encode(text, out_type=int)

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        """Many sentences -> their piece ids (one C++ call; `vtx preprocess` parallelizes over
        processes instead)."""
        return self._processor.encode(texts, out_type=int)

    def decode(self, ids: Iterable[int]) -> str:
        """Piece ids -> detokenized text; pad, bos and eos ids are dropped."""
        specials = (PAD_ID, BOS_ID, EOS_ID)
        return self._processor.decode([int(i) for i in ids if int(i) not in specials])

    def pieces(self, ids: Iterable[int]) -> list[str]:
        """Piece ids -> their pieces (e.g. "▁Haus")."""
        return [self._processor.id_to_piece(int(i)) for i in ids]


class _RaisingIterator:
    """Wraps an iterator; keeps the exception it raised, which SentencePiece turns into text."""

    def __init__(self, items: Iterator[str]):
        self._items = items
        self.error: Exception | None = None

    def __iter__(self) -> "_RaisingIterator":
        return self

    def __next__(self) -> str:
        try:
            return next(self._items)
        except StopIteration:
            raise
        except Exception as err:
            self.error = err
            raise


def train_sentencepiece(sentences: Iterator[str], model_path: Path, vocab_size: int,
                        model_type: str = "bpe", sample_lines: int = 2_000_000,
                        seed: int = 1, num_threads: int = 1,
                        whole_words: Sequence[str] = ()) -> Vocabulary:
    """Train a SentencePiece model on a bounded random sample of `sentences`; write `model_path`.

    SentencePiece reservoir-samples `sample_lines` of the streamed sentences, so memory and time
    stay bounded on WMT-size corpora (all lines are read once, only the sample is kept).

    Args:
        sentences: the text, one sentence per item (both languages for a joint vocabulary).
        model_path: where the `.model` file is written.
        vocab_size: number of pieces, the 4 special ones included.
        model_type: "bpe" (the paper's byte-pair encoding) or "unigram".
        sample_lines: upper bound on the sentences the trainer keeps.
        seed: seed of the sampling, so a run is reproducible.
        num_threads: trainer threads.
        whole_words: tokens that must each stay one piece wherever they stand as a word (after
            whitespace or at the start of a line), e.g. the brackets `(NP` `)NP` of linearized
            trees, which SentencePiece would otherwise cut into `(` and `NP`.

    Returns:
        The trained vocabulary.

    Raises:
        DataError: bad `model_type`, or SentencePiece rejects the settings for this text (e.g.
            `vocab_size` larger than the text supports); the message is SentencePiece's.
    """
    if model_type not in MODEL_TYPES:
        raise DataError(f"model type {model_type!r} is not one of {MODEL_TYPES}")
    for word in whole_words:
        if not word or any(c.isspace() for c in word):
            raise DataError(f"whole-word symbol {word!r} is empty or holds whitespace")
    spm.set_random_generator_seed(seed)
    model = io.BytesIO()
    reader = _RaisingIterator(sentences)
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=reader, model_writer=model, vocab_size=vocab_size,
            model_type=model_type, pad_id=PAD_ID, unk_id=UNK_ID, bos_id=BOS_ID, eos_id=EOS_ID,
            input_sentence_size=sample_lines, shuffle_input_sentence=True,
            # Characters outside the covered alphabet become UTF-8 byte pieces, not <unk>, so
            # any text round-trips (e.g. digits, rare in Multi30k).
            byte_fallback=True,
            # Marked with the word boundary so that each matches as a whole word only, never
            # inside another word, and costs one piece rather than a boundary piece plus itself.
            user_defined_symbols=[WORD_BOUNDARY + word for word in whole_words],
            num_threads=num_threads, minloglevel=2)
    except RuntimeError as err:
        if reader.error is not None:  # the text was bad, not the settings
            raise reader.error from None
        raise DataError(f"SentencePiece training failed (vocab size {vocab_size}, "
                        f"{model_type}): {err}") from None
    model_path.write_bytes(model.getvalue())
    return Vocabulary(model_path)
