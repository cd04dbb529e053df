"""Task metrics on the validation set during training: BLEU for translation, EVALB F1 for parsing.

At each validation the model being trained (its current weights, in the training precision, no
dropout) decodes the validation sources with beam search, and the output is scored:

- `bleu`: detokenized sacreBLEU (13a, mixed case) against the validation targets, decoded from the
  binarized data the same way as the hypotheses (fairseq's `--eval-bleu` does the same);
- `f1`: the outputs are delinearized over the words of the gold trees (the validation trees of
  `vtx prepare-parse`, e.g. `valid.gold`) and scored with EVALB's COLLINS.prm rules, as
  `vtx parse --gold` does.

The search settings are `vtx.inference.decoding.VALIDATION`'s; the search is compiled once (one
traced graph for every batch shape) and reused at every validation.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Callable

METRICS = ("bleu", "f1")


@dataclasses.dataclass(frozen=True)
class Score:
    """One validation's metric: its value (higher is better) and a one-line summary."""

    metric: str
    value: float
    summary: str


class ValidationScorer:
    """Decodes the validation set with `model` and scores it.

    Args:
        model: the vtx Transformer being trained (its weights are read at each call).
        vocab: the data's `Vocabulary`.
        pairs: (source ids, target ids) of the validation set, in file order
            (`pipeline.split_pairs`).
        metric: "bleu" or "f1".
        gold_path: for "f1": gold trees, one per line, aligned with `pairs`.
        beam, lenpen: search settings (default: those of `decoding.VALIDATION[metric]`).
        constrain_trees: for "f1": search only well-formed trees with one slot per word
            (`vtx.inference.tree_constraint`, as `vtx parse --constrain-trees`).
        max_tokens: source tokens per decoding batch.
        warn: receives the search's warnings (a batch searched in halves when the device ran
            out of memory).

    Raises:
        ValueError: unknown metric, "f1" without gold trees, or gold trees that do not match the
            validation set (count or words; the file and line named).
    """

    def __init__(self, model, vocab, pairs: list[tuple[list[int], list[int]]], metric: str,
                 gold_path: str | Path | None = None, beam: int | None = None,
                 lenpen: float | None = None, max_tokens: int = 4096,
                 constrain_trees: bool = False,
                 warn: Callable[[str], None] = lambda message: None):
        from vtx.inference.decoding import VALIDATION
        from vtx.inference.translator import Translator

        if metric not in METRICS:
            raise ValueError(f"validation metric must be one of {', '.join(METRICS)}, "
                             f"got {metric!r}")
        self.metric = metric
        self.sources = [source[:model.config.max_positions] for source, _ in pairs]
        preset = VALIDATION[metric]
        options = dataclasses.replace(preset, beam=beam or preset.beam,
                                      lenpen=preset.lenpen if lenpen is None else lenpen,
                                      max_tokens=max_tokens, constrain_trees=constrain_trees)
        self.translator = Translator([model], vocab, options, warn)
        if metric == "bleu":
            if constrain_trees:
                raise ValueError("constrain_trees is for the f1 metric (trees), not bleu")
            self.references = [vocab.decode(target) for _, target in pairs]
        else:
            if gold_path is None:
                raise ValueError("the f1 validation metric needs gold trees (valid.gold of "
                                 "vtx prepare-parse)")
            self.gold = _read_gold(gold_path, vocab, pairs)

    def __call__(self, should_stop: Callable[[], bool] | None = None) -> Score:
        """Decode the validation set with the model's current weights and score it;
        `should_stop` is asked before each batch is decoded.

        Raises:
            SearchInterrupted (`vtx.errors`): `should_stop()` returned true.
        """
        wanted = [i for i, source in enumerate(self.sources) if source]
        found = self.translator.search_ids([self.sources[i] for i in wanted], should_stop)
        hypotheses = [""] * len(self.sources)
        for index, best in zip(wanted, found):
            hypotheses[index] = best[0].text
        if self.metric == "bleu":
            return _bleu(hypotheses, self.references)
        return _f1(hypotheses, self.gold)


def _read_gold(path, vocab, pairs):
    from vtx.parsing import evalb

    gold = evalb.read_tree_lines(path)
    if len(gold) != len(pairs):
        raise ValueError(f"{path} has {len(gold)} trees but the validation set {len(pairs)} "
                         f"sentences")
    for line, (tree, (source, _)) in enumerate(zip(gold, pairs), start=1):
        words = tree.leaves() if tree is not None else []
        if len(words) != len(vocab.decode(source).split()):
            raise ValueError(f"{path}, line {line}: the gold tree has {len(words)} words but "
                             f"validation sentence {line} is {vocab.decode(source)!r}")
    return gold


def _bleu(hypotheses: list[str], references: list[str]) -> Score:
    import sacrebleu

    score = sacrebleu.metrics.BLEU().corpus_score(hypotheses, [references])
    return Score("bleu", float(score.score), str(score))


def _f1(hypotheses: list[str], gold) -> Score:
    from vtx.parsing import evalb
    from vtx.parsing.linearize import RepairStats, delinearize

    trees, repairs, repaired = [], RepairStats(), 0
    for text, tree in zip(hypotheses, gold):
        if tree is None:
            trees.append(None)
            continue
        words, tags = zip(*tree.tagged_words())
        parsed, stats = delinearize(text.split(), list(words), list(tags))
        trees.append(parsed)
        repairs += stats
        repaired += stats.total > 0
    totals = evalb.score_trees(gold, trees, max_errors=len(gold)).all
    value = totals.f1 if math.isfinite(totals.f1) else 0.0  # NaN: no bracket matched at all
    return Score("f1", value,
                 f"F1 {totals.f1:.2f} (recall {totals.recall:.2f}, precision "
                 f"{totals.precision:.2f}, exact {totals.complete_match:.2f}); "
                 f"{repaired} of {len(gold)} trees repaired, {repairs.total} repairs")


def make_scorer(model, data_dir, metric: str, **options) -> Callable[..., Score]:
    """A `ValidationScorer` over the validation split of a preprocessed data directory (a
    `vtx.data.directory.DataDirectory`, or its path)."""
    from vtx.data import pipeline
    from vtx.data.directory import opened

    data = opened(data_dir)
    return ValidationScorer(model, data.load_vocabulary(), pipeline.split_pairs(data, "valid"),
                            metric, **options)
