"""Joint source-target SentencePiece vocabulary (paper section 5.1: a shared BPE vocabulary).

Every model vtx trains or accepts has the fixed special ids of `vtx.config`: pad 0 (`<pad>`),
unk 1 (`<unk>`), bos 2 (`<s>`), eos 3 (`</s>`). Encoded sentences carry no bos/eos; the input
pipeline adds them.
"""

from __future__ import annotations

import io
import math
import random
import re
import threading
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import sentencepiece as spm

from vtx.config import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from vtx.errors import DataError, VocabularyTooSmallError

MODEL_TYPES = ("bpe", "unigram")
# SentencePiece's whitespace marker; a piece that starts with it begins a word.
WORD_BOUNDARY = "\u2581"
SPECIAL_IDS = {"pad": PAD_ID, "unk": UNK_ID, "bos": BOS_ID, "eos": EOS_ID}
# SentencePiece's refusal of a vocabulary smaller than the pieces the text's characters need
# (0.2.x: "... Vocabulary size is smaller than required_chars. 5 vs 316. Increase vocab_size or
# decrease character_coverage with --character_coverage option."): the size given, the minimum.
_TOO_SMALL = re.compile(r"Vocabulary size is smaller than required_chars\. (\d+) vs (\d+)\.")
# SentencePiece's seed is global to the process: one sampled encoding at a time sets and uses it.
_SAMPLING = threading.Lock()


class Vocabulary:
    """A SentencePiece model with vtx's special ids: text <-> token ids.

    Args:
        model_path: a SentencePiece `.model` file.

    Raises:
        DataError: the file cannot be loaded, or its special ids differ from `SPECIAL_IDS`.
    """

    source_suffix = ()  # ids appended to every encoded source: none (`PairVocabulary`'s may)

    def __init__(self, model_path: str | Path):
        self.model_path = Path(model_path)
        self._load(lambda processor: processor.Load(str(self.model_path)), str(self.model_path))

    @classmethod
    def from_bytes(cls, model: bytes, name: str) -> "Vocabulary":
        """A vocabulary from a serialized SentencePiece model (e.g. carried by a checkpoint);
        `name` says where it came from in messages. Its `model_path` is None. The bytes of a
        `vtx.data.pair_vocab.PairVocabulary` (an imported model's) give one of those.

        Raises:
            DataError: as the constructor.
        """
        from vtx.data import pair_vocab

        if pair_vocab.is_pair_vocabulary(model):
            return pair_vocab.PairVocabulary.from_bytes(model, name)
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

    def encode_source(self, text: str) -> list[int]:
        """A source sentence -> its piece ids: `encode`'s (a `PairVocabulary` cuts sources
        with a model of their own)."""
        return self.encode(text)

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        """Many sentences -> their piece ids (one C++ call; `vtx preprocess` parallelizes over
        processes instead)."""
        return self._processor.encode(texts, out_type=int)

    def encode_source_batch(self, texts: list[str]) -> list[list[int]]:
        """Many source sentences -> their piece ids: `encode_batch`'s."""
        return self.encode_batch(texts)

    def sample_batch(self, texts: list[str], alpha: float, nbest: int | None,
                     seed: int) -> list[list[int]]:
        """Many sentences -> a sampled segmentation of each, its piece ids (no bos/eos): subword
        regularization (Kudo 2018, section 3; for a BPE model, BPE-dropout: each merge dropped
        with probability `alpha`, Provilkov et al. 2020). The same texts, settings and `seed`
        give the same ids in any process.

        SentencePiece draws from a generator per thread, seeded from its global seed when the
        thread first draws; several threads share sentences in no fixed order. So the batch is
        encoded by one thread started here, after the global seed is set, under a lock.

        Args:
            alpha: BPE: the dropout probability of each merge, in (0, 1]; unigram: the
                smoothing exponent of the segmentations' probabilities.
            nbest: unigram: sample among the `nbest` best segmentations; None: among all.
            seed: the draw's seed (32 bits).
        """
        found: list = []  # the ids, or the error raised

        def encode():
            try:
                found.append(self._processor.encode(
                    texts, out_type=int, enable_sampling=True, alpha=alpha,
                    nbest_size=-1 if nbest is None else nbest, num_threads=1))
            except BaseException as error:  # noqa: BLE001 -- raised on the caller's thread
                found.append(error)

        with _SAMPLING:
            spm.set_random_generator_seed(seed)
            thread = threading.Thread(target=encode, name="vtx-subword-sampling")
            thread.start()
            thread.join()
        if isinstance(found[0], BaseException):
            raise found[0]
        return found[0]

    @property
    def model_type(self) -> str:
        """The model's type as SentencePiece names it, lower case: "bpe", "unigram", ..."""
        from sentencepiece import sentencepiece_model_pb2

        model = sentencepiece_model_pb2.ModelProto()
        model.ParseFromString(self._processor.serialized_model_proto())
        return sentencepiece_model_pb2.TrainerSpec.ModelType.Name(
            model.trainer_spec.model_type).lower()

    def decode(self, ids: Iterable[int]) -> str:
        """Piece ids -> detokenized text; pad, bos and eos ids are dropped."""
        specials = (PAD_ID, BOS_ID, EOS_ID)
        return self._processor.decode([int(i) for i in ids if int(i) not in specials])

    def pieces(self, ids: Iterable[int]) -> list[str]:
        """Piece ids -> their pieces (e.g. "▁Haus")."""
        return [self._processor.id_to_piece(int(i)) for i in ids]


def load(path: str | Path, name: str | None = None) -> "Vocabulary":
    """The vocabulary file at `path`: a SentencePiece model, or the bytes of a
    `vtx.data.pair_vocab.PairVocabulary` (an imported model's, `vtx preprocess --vocab-from`);
    `name` says where it came from in messages (default: the path).

    Raises:
        DataError: as the constructors.
    """
    from vtx.data import pair_vocab

    path = Path(path)
    try:
        with path.open("rb") as handle:
            is_pair = pair_vocab.is_pair_vocabulary(handle.read(len(pair_vocab.MAGIC)))
    except OSError as err:
        raise DataError(f"cannot read the vocabulary {path}: {err}") from None
    if is_pair:
        return pair_vocab.PairVocabulary.from_bytes(path.read_bytes(), name or str(path))
    return Vocabulary(path)


def differing_pieces(first: "Vocabulary", second: "Vocabulary") -> list[tuple[int, str | None,
                                                                          str | None]]:
    """(id, first's piece, second's piece) for every id whose pieces differ (None past a
    vocabulary's end): the same pieces serialized otherwise give none, and the ids mean the
    same."""
    ids = range(max(first.size, second.size))
    pairs = [(i, first.pieces([i])[0] if i < first.size else None,
              second.pieces([i])[0] if i < second.size else None) for i in ids]
    return [(i, a, b) for i, a, b in pairs if a != b]


def sample(items: Iterable[str], size: int, seed: int) -> list[str]:
    """A uniform random sample of at most `size` of `items`, read once, in their order of
    arrival where all fit; the same items and seed give the same sample in any process.

    Reservoir sampling, Li's "Algorithm L" (skips drawn from a geometric distribution, so a long
    stream costs a comparison a line, not a random number).
    """
    if size < 1:
        raise ValueError(f"sample size must be >= 1, got {size}")
    generator = random.Random(seed)
    kept: list[str] = []
    items = iter(items)
    for item in items:
        kept.append(item)
        if len(kept) == size:
            break
    else:
        return kept
    weight = math.exp(math.log(1.0 - generator.random()) / size)
    next_index = size - 1 + _skip(generator, weight)
    for index, item in enumerate(items, start=size):
        if index == next_index:
            kept[generator.randrange(size)] = item
            weight *= math.exp(math.log(1.0 - generator.random()) / size)
            next_index += _skip(generator, weight)
    return kept


def _skip(generator: random.Random, weight: float) -> int:
    """Algorithm L's step to the next item that enters the reservoir (>= 1)."""
    if weight >= 1.0:  # rounded to 1 (odds ~1e-10 a draw at 2M lines): nothing more enters
        return 2**62
    return int(math.log(1.0 - generator.random()) / math.log1p(-weight)) + 1


def train_sentencepiece(sentences: Iterator[str], model_path: Path, vocab_size: int,
                        model_type: str = "bpe", sample_lines: int = 2_000_000,
                        seed: int = 1, num_threads: int = 1,
                        whole_words: Sequence[str] = ()) -> Vocabulary:
    """Train a SentencePiece model on a bounded random sample of `sentences`; write `model_path`.

    `sample_lines` of the streamed sentences are reservoir-sampled (`sample`), so memory and time
    stay bounded on WMT-size corpora (all lines are read once, only the sample is kept). The
    sample is drawn here, from `seed`, not by SentencePiece: its own sample (0.2.3) changes from
    one process to the next whatever seed it is given, so the same text and flags gave another
    vocabulary, and other ids, on every run of `vtx preprocess`.

    Args:
        sentences: the text, one sentence per item (both languages for a joint vocabulary).
        model_path: where the `.model` file is written.
        vocab_size: number of pieces, the 4 special ones included.
        model_type: "bpe" (the paper's byte-pair encoding) or "unigram".
        sample_lines: upper bound on the sentences the trainer keeps.
        seed: seed of the sample, so that the same text and seed give the same model in any
            process.
        num_threads: trainer threads.
        whole_words: tokens that must each stay one piece wherever they stand as a word (after
            whitespace or at the start of a line), e.g. the brackets `(NP` `)NP` of linearized
            trees, which SentencePiece would otherwise cut into `(` and `NP`.

    Returns:
        The trained vocabulary.

    Raises:
        VocabularyTooSmallError: `vocab_size` is below the pieces the text's characters need.
        DataError: bad `model_type`, or SentencePiece rejects the settings for this text in
            another way (e.g. `vocab_size` larger than the text supports); the message is
            SentencePiece's.
    """
    if model_type not in MODEL_TYPES:
        raise DataError(f"model type {model_type!r} is not one of {MODEL_TYPES}")
    for word in whole_words:
        if not word or any(c.isspace() for c in word):
            raise DataError(f"whole-word symbol {word!r} is empty or holds whitespace")
    kept = sample(sentences, sample_lines, seed)  # the text's own errors surface as they are
    spm.set_random_generator_seed(seed)
    model = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(kept), model_writer=model, vocab_size=vocab_size,
            model_type=model_type, pad_id=PAD_ID, unk_id=UNK_ID, bos_id=BOS_ID, eos_id=EOS_ID,
            # The sample holds at most sample_lines, so SentencePiece keeps every line; what it
            # then does with them is the same in every process, and kept so that a text under
            # sample_lines always gets the same vocabulary (Multi30k's, byte for byte).
            input_sentence_size=sample_lines, shuffle_input_sentence=True,
            # Characters outside the covered alphabet become UTF-8 byte pieces, not <unk>, so
            # any text round-trips (e.g. digits, rare in Multi30k).
            byte_fallback=True,
            # Marked with the word boundary so that each matches as a whole word only, never
            # inside another word, and costs one piece rather than a boundary piece plus itself.
            user_defined_symbols=[WORD_BOUNDARY + word for word in whole_words],
            num_threads=num_threads, minloglevel=2)
    except RuntimeError as err:
        if too_small := _TOO_SMALL.search(str(err)):
            raise VocabularyTooSmallError(vocab_size, int(too_small.group(2))) from None
        raise DataError(f"SentencePiece training failed (vocab size {vocab_size}, "
                        f"{model_type}): {err}") from None
    model_path.write_bytes(model.getvalue())
    return Vocabulary(model_path)
