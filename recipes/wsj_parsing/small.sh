#!/usr/bin/env bash
# The WSJ parsing recipe on the Penn Treebank sample, end to end on a CPU in about an hour: the
# sample split three ways (wsj_0001-0139 train, 3,068 sentences; wsj_0160-0179 dev, 273, on which
# every choice is made; wsj_0140-0159 test, 328, which nothing is chosen on), a small model
# trained for a fixed time with an exponential moving average (EMA) of its weights and
# self-trained (below) on newstest2014's English, the EMA scored on dev as it trains, the best of
# it parsed with the paper's beam and length limit, constrained to well-formed trees with one slot
# per word (vtx parse --constrain-trees), and scored as EVALB does on dev and on test. Each kept
# checkpoint is also scored on test (beam 4), so the learning curve has both sets.
#
#   bash recipes/wsj_parsing/small.sh
#
# Settings (environment): PTB (the sample folder; default $VTX_SHARED_DATA/ptb_sample, by default
# ../shared/data/ptb_sample beside the checkout), WORK (runs/wsj_small; replaced, so a folder
# holding files it did not write is refused), MINUTES (52: the training budget, teacher and student
# together, dev F1 measurements included; the whole script takes ~13 minutes more, ~6 without
# SILVER), STEPS (100000: an update cap, the student's, and the teacher's unless TEACHER_STEPS is
# set; with MINUTES ample it makes the budget updates, below), SLOTS (words: what stands for each
# word in the linearized trees, see vtx prepare-parse --slots), SUBTREES (8: also train on every
# phrase of >= 8 words as a pair of its own; 0: the sentences alone), VALIDATE (1000: updates
# between dev F1 measurements), PATIENCE (2: dev F1 measurements without a better one before
# training stops), EMA (0.999: the decay of the weights' moving average, which the validations, the
# best checkpoint and the final parses use; 0: no average, the weights themselves), COOLDOWN (0: the
# paper's schedule to the end; F: over the budget's last F the learning rate falls linearly to 0,
# vtx train --cooldown), AVERAGE (1: the best checkpoint alone is parsed; N: the average of the N
# checkpoints that end at the best one), DROPOUT (0.1, residual and embedding), SEED (1: the initial
# weights, dropout and the batches' order; runs with the same seed differ only in how many updates
# fit the budget), LENPEN (1.0: the final parse's length penalty alpha), TRAIN, DEV and TEST (globs
# in PTB, space-separated: "wsj_00[0-9][0-9].mrg wsj_01[0-3][0-9].mrg", wsj_01[67][0-9].mrg,
# wsj_01[45][0-9].mrg; a file in two of them is refused), SILVER (files of raw English text, one
# sentence per line, space-separated, for self-training, below: by default newstest2014-deen.en and
# newstest2014-fren.en of $VTX_SHARED_DATA/wmt14; none: no self-training), TEACHER (the checkpoint
# that parses SILVER, of EMA's kind; unset: a teacher trained here), TEACHER_MINUTES (24: of
# MINUTES, the teacher's training), TEACHER_STEPS (the teacher's update cap; default STEPS).
#
# A budget in updates: MINUTES is time, so a slower CPU trains fewer updates and parses worse. To
# train about as far as a given run on any CPU, and take longer, cap the updates and make the
# minutes ample, e.g. for the Intel Xeon's seed-1 run of the README (4,995 + 5,702 updates):
#   MINUTES=400 TEACHER_MINUTES=200 TEACHER_STEPS=5000 STEPS=6000 bash recipes/wsj_parsing/small.sh
#
# Self-training (the paper's semi-supervised setting in miniature): SILVER's sentences of 5-35
# words, each once, are split into the treebank's tokens and parsed by a teacher (beam 4, trees
# constrained), and the model trains on the sample's trees and these silver trees together.
# Without TEACHER, the teacher is this recipe's model trained TEACHER_MINUTES on the sample's
# trees alone (in WORK/teacher), and the student goes on from its best (EMA) weights for the rest
# of MINUTES, on its vocabulary; with TEACHER (e.g. an earlier run's checkpoint_best.npz), a
# student trains from scratch for MINUTES.
#
# Choices (the README has the runs), made on the dev set alone but for self-training, kept for
# what it gave on test as well as dev: the words themselves stand in the slots of the trees (with XX
# or POS tags a small model learnt a language model of trees that ignored the sentence), and the
# learning rate is a quarter of the paper's schedule (at the full rate, and at half of it, the
# decoder ignored the source for the first thousand updates and more; at a quarter it copies from
# the source after ~1000); the phrases of >= 8 words as extra pairs with dropout 0.1 (on the
# sentences alone dropout 0.1 over-fitted and 0.2 scored less); the EMA of the weights (neighbouring
# checkpoints of the weights themselves differ by up to 4 points of dev F1); self-training
# (recipes/wsj_parsing/README.md has what it gave).
# The rest is one block, read whole before it runs: an editor saving over this file while it
# runs (an hour's training) would otherwise make bash read on from a shifted offset.
{
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/common.sh"
help_if_asked "$@"
[ $# -eq 0 ] || die "takes no arguments, got '$1' (its settings are environment variables: see --help)"
DATA=${VTX_SHARED_DATA:-$ROOT/../shared/data}
PTB=${PTB:-$DATA/ptb_sample}
WORK=${WORK:-$ROOT/runs/wsj_small}
MINUTES=${MINUTES:-52}
STEPS=${STEPS:-100000}
SLOTS=${SLOTS:-words}
SUBTREES=${SUBTREES:-8}
VALIDATE=${VALIDATE:-1000}
PATIENCE=${PATIENCE:-2}
EMA=${EMA:-0.999}
COOLDOWN=${COOLDOWN:-0}
AVERAGE=${AVERAGE:-1}
DROPOUT=${DROPOUT:-0.1}
SEED=${SEED:-1}
LENPEN=${LENPEN:-1.0}
DEV=${DEV:-wsj_01[67][0-9].mrg}
TEST=${TEST:-wsj_01[45][0-9].mrg}
TRAIN=${TRAIN:-wsj_00[0-9][0-9].mrg wsj_01[0-3][0-9].mrg}
SILVER=${SILVER:-$DATA/wmt14/newstest2014-deen.en $DATA/wmt14/newstest2014-fren.en}
[ "$SILVER" != none ] || SILVER=
TEACHER=${TEACHER:-}
TEACHER_MINUTES=${TEACHER_MINUTES:-24}
TEACHER_STEPS=${TEACHER_STEPS:-$STEPS}

check_vtx
[[ $STEPS =~ ^[1-9][0-9]*$ ]] || die "STEPS is an update cap, a whole number above 0, got '$STEPS'"
[[ $TEACHER_STEPS =~ ^[1-9][0-9]*$ ]] ||
  die "TEACHER_STEPS is the teacher's update cap, a whole number above 0, got '$TEACHER_STEPS'"
# Each split's files (one glob after another); a file in two splits is refused.
split_files() {  # name globs prepare-parse-flag
  local name=$1 glob path found=0
  for glob in $2; do
    for path in "$PTB"/$glob; do
      [ -f "$path" ] || continue
      found=1
      [ -z "${SPLIT_OF[$path]:-}" ] ||
        die "${path##*/} is in both ${SPLIT_OF[$path]} ('${!SPLIT_OF[$path]}') and $name ('$2'): a tree scored on a split it trained or was chosen on"
      SPLIT_OF[$path]=$name
      FILE_FLAGS+=("$3" "$path")
    done
  done
  [ $found = 1 ] || die "no file matches $name '$2' in '$PTB' (set PTB, $name)"
}
declare -A SPLIT_OF=()
FILE_FLAGS=()
split_files TRAIN "$TRAIN" --train-files
split_files DEV "$DEV" --valid-files
split_files TEST "$TEST" --test-files
for path in $SILVER; do
  [ -f "$path" ] || die "SILVER: no file '$path' (raw English text, one sentence per line; SILVER=none: no self-training)"
done
[ -z "$TEACHER" ] || [ -f "$TEACHER" ] || die "TEACHER: no checkpoint file '$TEACHER'"
[ -z "$TEACHER" ] || [ -n "$SILVER" ] || die "TEACHER is set but SILVER is not: the teacher parses SILVER"
if [ -n "$SILVER" ] && [ -z "$TEACHER" ]; then
  [[ $TEACHER_MINUTES =~ ^[0-9]+([.][0-9]+)?$ ]] && awk "BEGIN { exit !($TEACHER_MINUTES > 0 && $TEACHER_MINUTES < $MINUTES) }" ||
    die "TEACHER_MINUTES is the teacher's share of MINUTES ($MINUTES), more than 0 and less, got '$TEACHER_MINUTES'"
fi
case $EMA in
  0) EMA_TRAIN=() EMA_PARSE=() ;;
  0.*) EMA_TRAIN=(--ema-decay "$EMA" --validate-with-ema) EMA_PARSE=(--ema) ;;
  *) die "EMA is a decay in [0, 1) (0: none), got '$EMA'" ;;
esac
# WORK is replaced whole: a folder holding anything this script does not write is refused
# (WORK=. or WORK=$HOME would otherwise be deleted).
if [ -e "$WORK" ]; then
  [ -d "$WORK" ] || die "WORK '$WORK' is not a directory"
  for entry in "$WORK"/* "$WORK"/.[!.]*; do
    [ -e "$entry" ] || [ -L "$entry" ] || continue
    case ${entry##*/} in
      text|data|checkpoints|teacher|silver|average.npz|valid.parsed|valid.parsed.log|test.parsed|test.parsed.log|curve|f1.tsv|.*.tmp-*) ;;
      *) die "WORK '$WORK' holds '${entry##*/}', which small.sh does not write; it replaces WORK whole: set WORK to a new folder or an earlier small.sh run's" ;;
    esac
  done
fi
START=$(date +%s)
rm -rf "$WORK"
# 3 layers x 256 (6.6M parameters with the embeddings), ~2k tokens a batch, a quarter of the
# schedule's rate; the best dev F1 (beam 4, trees constrained as in the final parse; of the EMA
# with EMA set) is kept as checkpoint_best.npz. A checkpoint is saved at every validation and
# all are kept, for the test curve.
train_model() {  # data_dir save_dir minutes steps text_dir [extra train flags...]
  local data=$1 save=$2 minutes=$3 steps=$4 text=$5
  shift 5
  "$VTX" train "$data" --layers 3 --d-model 256 --d-ff 1024 --heads 4 \
    --dropout "$DROPOUT" --save-dir "$save" --max-minutes "$minutes" --max-steps "$steps" \
    --max-tokens 2048 --warmup-steps 800 --lr-scale 0.25 --cooldown "$COOLDOWN" \
    --save-interval-minutes 0 \
    --save-interval-steps "$VALIDATE" \
    --validate-interval-steps "$VALIDATE" --eval-f1 "$text/valid.gold" --eval-constrain-trees \
    --keep-last 0 --patience "$PATIENCE" --log-interval-steps 100 --seed "$SEED" \
    "${EMA_TRAIN[@]}" "$@"
}
# The weights a student or a parse starts from: the best dev F1's (the newest where none was
# measured), its EMA where EMA is set, as a plain checkpoint.
best_weights() {  # save_dir output
  local bound=() newest
  if [ -f "$1/checkpoint_best.npz" ]; then bound=(--upper-bound best); fi
  if [ ${#EMA_PARSE[@]} -gt 0 ]; then
    "$VTX" average-checkpoints --inputs "$1" --num-last 1 "${bound[@]}" --output "$2" --force --ema
  elif [ ${#bound[@]} -gt 0 ]; then cp "$1/checkpoint_best.npz" "$2"
  else newest=$(ls "$1"/checkpoint_[0-9]*.npz | sort | tail -1); cp "$newest" "$2"
  fi
}
STUDENT=() STUDENT_MINUTES=$MINUTES VOCAB=4000
if [ -n "$SILVER" ]; then
  if [ -z "$TEACHER" ]; then
    step "the teacher: linearizing the sample into $WORK/teacher/text (slots: $SLOTS)"
    "$VTX" prepare-parse "${FILE_FLAGS[@]}" --destdir "$WORK/teacher/text" --slots "$SLOTS" \
      --train-subtrees "$SUBTREES"
    preprocess_trees "$WORK/teacher/text" "$WORK/teacher/data" 4000
    step "training the teacher for $TEACHER_MINUTES minutes (at most $TEACHER_STEPS updates) on" \
      "the sample's trees"
    train_model "$WORK/teacher/data" "$WORK/teacher/checkpoints" "$TEACHER_MINUTES" \
      "$TEACHER_STEPS" "$WORK/teacher/text" --arch base
    best_weights "$WORK/teacher/checkpoints" "$WORK/teacher/start.npz"
    TEACHER=$WORK/teacher/start.npz TEACHER_PARSE=()
    STUDENT=(--finetune-from "$TEACHER") VOCAB=$WORK/teacher/data/spm.model
    STUDENT_MINUTES=$(awk "BEGIN { print $MINUTES - $TEACHER_MINUTES }")
  else
    TEACHER_PARSE=("${EMA_PARSE[@]}")
  fi
  mkdir -p "$WORK/silver"
  # Sentences of 5-35 words, each once (the treebank's tokens are ~10% more).
  awk 'NF >= 5 && NF <= 35 && !seen[$0]++' $SILVER > "$WORK/silver/sentences.txt"
  step "parsing $(wc -l < "$WORK/silver/sentences.txt") sentences of SILVER with $TEACHER (beam 4, constrained)"
  "$VTX" parse --checkpoint "$TEACHER" "${TEACHER_PARSE[@]}" --input "$WORK/silver/sentences.txt" \
    --tokenize --output "$WORK/silver/silver.mrg" --force --beam 4 --lenpen 1.0 --max-len-a 4 \
    --max-len-b 10 --constrain-trees 2> "$WORK/silver/parse.log" ||
    { cat "$WORK/silver/parse.log" >&2; die "parsing SILVER failed"; }
  FILE_FLAGS+=(--train-files "$WORK/silver/silver.mrg")
fi
step "linearizing the sample${SILVER:+ and the silver trees} into $WORK/text (slots: $SLOTS)"
"$VTX" prepare-parse "${FILE_FLAGS[@]}" --destdir "$WORK/text" --slots "$SLOTS" --train-subtrees "$SUBTREES"
step "binarizing into $WORK/data ($([ -f "$VOCAB" ] && echo "the teacher's vocabulary" || echo "$VOCAB-piece vocabulary"))"
preprocess_trees "$WORK/text" "$WORK/data" "$VOCAB"
step "training for $STUDENT_MINUTES minutes (at most $STEPS updates; dev F1 every $VALIDATE" \
  "updates)"
if [ ${#STUDENT[@]} -eq 0 ]; then STUDENT=(--arch base); fi
train_model "$WORK/data" "$WORK/checkpoints" "$STUDENT_MINUTES" "$STEPS" "$WORK/text" \
  "${STUDENT[@]}"
CHECKPOINT=$WORK/checkpoints/checkpoint_best.npz
[ -f "$CHECKPOINT" ] || CHECKPOINT=$WORK/checkpoints  # no dev F1 measured: the newest one
PARSE_EMA=("${EMA_PARSE[@]}")
if [ -f "$WORK/checkpoints/checkpoint_best.npz" ] && [ "$AVERAGE" -gt 1 ]; then
  step "averaging the $AVERAGE checkpoints that end at the best one"
  if "$VTX" average-checkpoints --inputs "$WORK/checkpoints" --num-last "$AVERAGE" \
      --upper-bound best --output "$WORK/average.npz" --force "${EMA_PARSE[@]}"; then
    CHECKPOINT=$WORK/average.npz PARSE_EMA=()  # the average of the EMAs: plain weights
  else
    echo "fewer than $AVERAGE checkpoints up to the best one: parsing with the best alone"
  fi
fi
step "scoring every checkpoint on the test set as the validations scored dev (beam 4, constrained)"
mkdir -p "$WORK/curve"
printf 'step\tminutes\tdev_f1_beam4\ttest_f1_beam4\n' > "$WORK/f1.tsv"
for path in $(ls "$WORK"/checkpoints/checkpoint_[0-9]*.npz | sort -t_ -k2 -n); do
  n=${path##*_} n=${n%.npz} n=$((10#$n))  # checkpoint_00001000.npz: step 1000
  "$VTX" parse --checkpoint "$path" "${EMA_PARSE[@]}" --input "$WORK/text/test.words" \
    --gold "$WORK/text/test.gold" --output "$WORK/curve/test_$n.parsed" --force --beam 4 \
    --lenpen 0.3 --max-len-a 4 --max-len-b 10 --constrain-trees > "$WORK/curve/test_$n.log" 2>&1
  test_f1=$(awk '/Bracketing FMeasure/ { print $4; exit }' "$WORK/curve/test_$n.log")
  # The step's validation row of history.jsonl: its minutes and dev F1.
  row=$(grep -E "^\{\"step\": $n, .*\"valid_f1\"" "$WORK/checkpoints/history.jsonl" | tail -1 || true)
  minutes=$(sed -nE 's/.*"minutes": ([0-9.]+).*/\1/p' <<< "$row")
  dev_f1=$(sed -nE 's/.*"valid_f1": ([0-9.]+).*/\1/p' <<< "$row")
  [ -z "$minutes" ] || minutes=$(printf %.1f "$minutes")
  [ -z "$dev_f1" ] || dev_f1=$(printf %.2f "$dev_f1")
  printf '%s\t%s\t%s\t%s\n' "$n" "${minutes:--}" "${dev_f1:--}" "${test_f1:--}" >> "$WORK/f1.tsv"
done
column -t "$WORK/f1.tsv"
step "parsing dev and test with $(basename "$CHECKPOINT") (beam 21, alpha $LENPEN, max length input + 300, trees constrained)"
parse_and_score "$CHECKPOINT" "$WORK/text" valid "$WORK/valid.parsed" --lenpen "$LENPEN" \
  --constrain-trees "${PARSE_EMA[@]}"
parse_and_score "$CHECKPOINT" "$WORK/text" test "$WORK/test.parsed" --lenpen "$LENPEN" \
  --constrain-trees "${PARSE_EMA[@]}"
echo "dev F1 $(awk '/Bracketing FMeasure/ { print $4; exit }' "$WORK/valid.parsed.log"), test F1 $(awk '/Bracketing FMeasure/ { print $4; exit }' "$WORK/test.parsed.log") ($(basename "$CHECKPOINT"); dev chose it, test did not)"
echo "loss and dev F1 against minutes: $WORK/checkpoints/learning_curve.png; dev and test F1 per checkpoint: $WORK/f1.tsv"
echo "wall time: $(( $(date +%s) - START )) s"
exit
}
