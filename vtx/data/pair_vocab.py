"""A vocabulary of two SentencePiece models and one id table: a source model that cuts the
source text into pieces, a target model that joins target pieces into text, and a table that
gives every piece of either side its id (Marian's `vocab.json`, one table for both sides).

It keeps vtx's special ids (pad 0, unk 1, bos 2, eos 3; `vtx.config`), so that the model,
its search and its scoring read it as they read a `vtx.data.vocab.Vocabulary`; a piece missing
from the table is unk, as MarianTokenizer makes it. Each source may end with fixed ids
(`source_suffix`: Marian's models read `</s>` after every source), and a source that starts
with a target-language token (`>>deu<<`, multilingual OPUS-MT models) has that token as its
first piece, as MarianTokenizer reads it.

It travels as bytes (`to_bytes`, the checkpoint's vocabulary entry): a header line, then JSON
holding both SentencePiece models (base64) and the pieces in id order.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Sequence

import sentencepiece as spm

from vtx.config import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from vtx.errors import DataError

MAGIC = b"vtx pair vocabulary 1\n"
_SPECIAL_PIECES = {PAD_ID: "<pad>", UNK_ID: "<unk>", BOS_ID: "<s>", EOS_ID: "</s>"}


def is_pair_vocabulary(model: bytes) -> bool:
    """Whether a checkpoint's vocabulary bytes are a `PairVocabulary`'s (else SentencePiece's)."""
    return model.startswith(MAGIC)


class PairVocabulary:
    """Text <-> ids through a source and a target SentencePiece model and an id table.

    Args:
        source_model, target_model: serialized SentencePiece models.
        pieces: the piece of each id, in id order; ids 0-3 are `<pad>`, `<unk>`, `<s>`, `</s>`.
        source_suffix: ids appended to every encoded source.
        name: where it came from, in messages.

    Raises:
        DataError: a model that does not load, special pieces out of place, a piece twice, or a
            suffix id outside the table (each named with `name`).
    """

    model_path = None  # read from bytes, never from a file of its own

    def __init__(self, source_model: bytes, target_model: bytes, pieces: Sequence[str],
                 source_suffix: Sequence[int] = (), name: str = "the vocabulary"):
        self.name = name
        self._source, self._target = _load(source_model, name), _load(target_model, name)
        self._models = (source_model, target_model)
        self._pieces = list(pieces)
        specials = {i: self._pieces[i] if i < len(self._pieces) else None for i in _SPECIAL_PIECES}
        if specials != _SPECIAL_PIECES:
            raise DataError(f"{name}: its ids 0-3 are {list(specials.values())}, vtx needs "
                            f"{list(_SPECIAL_PIECES.values())}")
        self._ids = {piece: index for index, piece in enumerate(self._pieces)}
        if len(self._ids) != len(self._pieces):
            repeated = next(p for p in self._pieces if self._pieces.count(p) > 1)
            raise DataError(f"{name}: the piece {repeated!r} has two ids")
        self.source_suffix = [int(i) for i in source_suffix]
        if any(not 0 <= i < len(self._pieces) for i in self.source_suffix):
            raise DataError(f"{name}: source suffix {self.source_suffix} holds an id outside "
                            f"its {len(self._pieces)} pieces")

    @classmethod
    def from_bytes(cls, model: bytes, name: str) -> "PairVocabulary":
        """The vocabulary `to_bytes` wrote; `name` says where it came from in messages.

        Raises:
            DataError: not such bytes, or as the constructor.
        """
        if not is_pair_vocabulary(model):
            raise DataError(f"{name}: not a pair vocabulary (no {MAGIC!r} header)")
        try:
            fields = json.loads(model[len(MAGIC):].decode("utf-8"))
            return cls(base64.b64decode(fields["source_model"]),
                       base64.b64decode(fields["target_model"]), fields["pieces"],
                       fields["source_suffix"], name)
        except (ValueError, KeyError, TypeError) as error:
            raise DataError(f"{name}: a damaged pair vocabulary ({type(error).__name__}: "
                            f"{error})") from None

    def to_bytes(self) -> bytes:
        fields = {"source_model": base64.b64encode(self._models[0]).decode("ascii"),
                  "target_model": base64.b64encode(self._models[1]).decode("ascii"),
                  "pieces": self._pieces, "source_suffix": self.source_suffix}
        return MAGIC + json.dumps(fields, ensure_ascii=False, sort_keys=True).encode("utf-8")

    @property
    def models(self) -> tuple[bytes, bytes]:
        """The serialized source and target SentencePiece models."""
        return self._models

    @property
    def pieces_in_order(self) -> list[str]:
        """The piece of each id, in id order."""
        return list(self._pieces)

    def target_model_ids(self) -> list[int]:
        """Each id's id in the target model (its unknown piece's where it lacks the piece):
        what `decode` joins, as a table for a graph (`vtx.export.savedmodel`)."""
        return [self._target.piece_to_id(piece) for piece in self._pieces]

    @property
    def size(self) -> int:
        """Number of ids, special ones included."""
        return len(self._pieces)

    @property
    def model_type(self) -> str:
        """The source SentencePiece model's type, lower case ("unigram", "bpe")."""
        from sentencepiece import sentencepiece_model_pb2

        model = sentencepiece_model_pb2.ModelProto()
        model.ParseFromString(self._models[0])
        return sentencepiece_model_pb2.TrainerSpec.ModelType.Name(
            model.trainer_spec.model_type).lower()

    def _ids_of(self, pieces: Iterable[str]) -> list[int]:
        return [self._ids.get(piece, UNK_ID) for piece in pieces]

    def encode(self, text: str) -> list[int]:
        """A target sentence -> its ids (target model's pieces, no bos/eos)."""
        return self._ids_of(self._target.encode(text, out_type=str))

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        """Many target sentences -> their ids."""
        return [self.encode(text) for text in texts]

    def encode_source(self, text: str) -> list[int]:
        """A source sentence -> its ids: a leading `>>xx<<` token as one piece, the source
        model's pieces of the rest, then `source_suffix` (MarianTokenizer's source ids)."""
        code = []
        if text.startswith(">>") and (end := text.find("<<")) != -1:
            code, text = [text[:end + 2]], text[end + 2:]
        return self._ids_of(code + self._source.encode(text, out_type=str)) + self.source_suffix

    def encode_source_batch(self, texts: list[str]) -> list[list[int]]:
        """Many source sentences -> their ids (`encode_source`'s)."""
        return [self.encode_source(text) for text in texts]

    def sample_batch(self, texts: list[str], alpha: float, nbest: int | None,
                     seed: int) -> list[list[int]]:
        """Refused: subword sampling reads one SentencePiece model's own ids.

        Raises:
            DataError: always, naming the vocabulary.
        """
        raise DataError(f"{self.name}: subword sampling (--subword-alpha) needs a "
                        f"SentencePiece vocabulary of vtx's; this one maps two models' "
                        f"pieces through an id table")

    def decode(self, ids: Iterable[int]) -> str:
        """Ids -> text, joined by the target model; pad, unk, bos and eos are dropped (as
        MarianTokenizer's `decode(skip_special_tokens=True)` drops them), and a piece the
        target model lacks reads as its unknown piece."""
        specials = (PAD_ID, UNK_ID, BOS_ID, EOS_ID)
        return self._target.decode_pieces(self.pieces(i for i in ids if int(i) not in specials))

    def pieces(self, ids: Iterable[int]) -> list[str]:
        """Ids -> their pieces (e.g. "▁Haus")."""
        return [self._pieces[int(i)] for i in ids]


def _load(model: bytes, name: str) -> spm.SentencePieceProcessor:
    processor = spm.SentencePieceProcessor()
    try:
        processor.LoadFromSerializedProto(model)
    except (OSError, RuntimeError) as error:
        raise DataError(f"cannot load a SentencePiece model of {name}: {error}") from None
    return processor
