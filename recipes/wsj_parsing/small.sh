#!/usr/bin/env bash
# The WSJ parsing recipe on the Penn Treebank sample, end to end on a CPU within an hour: the
# sample (wsj_0001-0159 train, 3396 sentences; wsj_0160-0179 dev, 273 sentences), a small model
# trained for a fixed time with dev F1 measured as it trains, the best of it parsed with the
# paper's beam and length limit (alpha chosen on the dev set), constrained to well-formed trees with
# one slot per word (vtx parse --constrain-trees), and scored as EVALB does.
#
#   bash recipes/wsj_parsing/small.sh
#
# Settings (environment): PTB (the sample folder; default $VTX_SHARED_DATA/ptb_sample, by default
# ../shared/data/ptb_sample beside the checkout), WORK (runs/wsj_small; replaced, so a folder
# holding files it did not write is refused), MINUTES (55:
# the training budget, dev F1 measurements included; the whole script takes ~2 minutes more),
# STEPS (an update cap, 100000), SLOTS (words:
# what stands for each word in the linearized trees, see vtx prepare-parse --slots), SUBTREES (8:
# also train on every phrase of >= 8 words as a pair of its own; 0: the sentences alone),
# VALIDATE
# (1000: updates between dev F1 measurements), PATIENCE (2: dev F1 measurements without a better
# one before training stops), AVERAGE (1: the best checkpoint alone is parsed; N: the average of
# the N checkpoints that end at the best one), DROPOUT (0.1, residual and embedding), LENPEN (1.0:
# the final parse's length penalty alpha), DEV (the dev files, a glob in PTB: wsj_01[67][0-9].mrg).
#
# Choices, made on the dev set only (docs/results.md has the runs): the words themselves stand in
# the slots of the trees (with XX or POS tags a small model learnt a language model of trees that
# ignored the sentence), and the learning rate is a quarter of the paper's schedule (at the full
# rate, and at half of it, the decoder ignored the source for the first thousand updates and
# more; at a quarter it copies from the source after ~1000); the phrases of >= 8 words as extra
# pairs with dropout 0.1 (67.00 in 50 minutes; on the sentences alone dropout 0.1 over-fitted
# after 37 minutes and 0.2 gave 66.54, 0.3 learnt too slowly for the budget; the phrases with 0.2
# gave 62.71), no averaging (averages of the checkpoints around the best scored 0.4-2.6 F1 less
# than the best alone).
# The rest is one block, read whole before it runs: an editor saving over this file while it
# runs (an hour's training) would otherwise make bash read on from a shifted offset.
{
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/common.sh"
help_if_asked "$@"
[ $# -eq 0 ] || die "takes no arguments, got '$1' (its settings are environment variables: see --help)"
PTB=${PTB:-${VTX_SHARED_DATA:-$ROOT/../shared/data}/ptb_sample}
WORK=${WORK:-$ROOT/runs/wsj_small}
MINUTES=${MINUTES:-55}
STEPS=${STEPS:-100000}
SLOTS=${SLOTS:-words}
SUBTREES=${SUBTREES:-8}
VALIDATE=${VALIDATE:-1000}
PATIENCE=${PATIENCE:-2}
AVERAGE=${AVERAGE:-1}
DROPOUT=${DROPOUT:-0.1}
LENPEN=${LENPEN:-1.0}
DEV=${DEV:-wsj_01[67][0-9].mrg}

check_vtx
compgen -G "$PTB/wsj_0001.mrg" > /dev/null && compgen -G "$PTB/$DEV" > /dev/null ||
  die "no wsj_0001.mrg or no dev file $DEV in '$PTB' (set PTB, DEV)"
# WORK is replaced whole: a folder holding anything this script does not write is refused
# (WORK=. or WORK=$HOME would otherwise be deleted).
if [ -e "$WORK" ]; then
  [ -d "$WORK" ] || die "WORK '$WORK' is not a directory"
  for entry in "$WORK"/* "$WORK"/.[!.]*; do
    [ -e "$entry" ] || [ -L "$entry" ] || continue
    case ${entry##*/} in
      text|data|checkpoints|average.npz|valid.parsed|valid.parsed.log|.*.tmp-*) ;;
      *) die "WORK '$WORK' holds '${entry##*/}', which small.sh does not write; it replaces WORK whole: set WORK to a new folder or an earlier small.sh run's" ;;
    esac
  done
fi
START=$(date +%s)
rm -rf "$WORK"
step "linearizing the sample into $WORK/text (slots: $SLOTS)"
"$VTX" prepare-parse --train-files "$PTB/wsj_00[0-9][0-9].mrg" \
  --train-files "$PTB/wsj_01[0-5][0-9].mrg" --valid-files "$PTB/$DEV" \
  --destdir "$WORK/text" --slots "$SLOTS" --train-subtrees "$SUBTREES"
step "binarizing into $WORK/data (4000-piece vocabulary)"
preprocess_trees "$WORK/text" "$WORK/data" 4000
step "training for $MINUTES minutes (dev F1 every $VALIDATE updates)"
# 3 layers x 256 (6.6M parameters with the embeddings), ~2k tokens a batch, a quarter of the
# schedule's rate; the best dev F1 (beam 4, trees constrained as in the final parse) is kept as
# checkpoint_best.npz.
"$VTX" train "$WORK/data" --arch base --layers 3 --d-model 256 --d-ff 1024 --heads 4 \
  --dropout "$DROPOUT" --save-dir "$WORK/checkpoints" --max-minutes "$MINUTES" --max-steps "$STEPS" \
  --max-tokens 2048 --warmup-steps 800 --lr-scale 0.25 --save-interval-minutes 0 \
  --validate-interval-steps "$VALIDATE" --eval-f1 "$WORK/text/valid.gold" --eval-constrain-trees \
  --keep-last 6 --patience "$PATIENCE" --log-interval-steps 100
CHECKPOINT=$WORK/checkpoints/checkpoint_best.npz
[ -f "$CHECKPOINT" ] || CHECKPOINT=$WORK/checkpoints  # no dev F1 measured: the newest one
if [ -f "$WORK/checkpoints/checkpoint_best.npz" ] && [ "$AVERAGE" -gt 1 ]; then
  step "averaging the $AVERAGE checkpoints that end at the best one"
  if "$VTX" average-checkpoints --inputs "$WORK/checkpoints" --num-last "$AVERAGE" \
      --upper-bound best --output "$WORK/average.npz" --force; then
    CHECKPOINT=$WORK/average.npz
  else
    echo "fewer than $AVERAGE checkpoints up to the best one: parsing with the best alone"
  fi
fi
step "parsing the dev set with $(basename "$CHECKPOINT") (beam 21, alpha $LENPEN, max length input + 300, trees constrained)"
parse_and_score "$CHECKPOINT" "$WORK/text" valid "$WORK/valid.parsed" --lenpen "$LENPEN" \
  --constrain-trees
echo "dev F1 during training, against minutes: $WORK/checkpoints/learning_curve.png"
echo "wall time: $(( $(date +%s) - START )) s"
exit
}
