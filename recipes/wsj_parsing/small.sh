#!/usr/bin/env bash
# The WSJ parsing recipe at toy scale, end to end on a CPU: the Penn Treebank sample
# (wsj_0001-0159 train, 3396 sentences; wsj_0160-0179 dev, 273 sentences), a small model,
# the paper's decoding, EVALB-style dev F1.
#
#   bash recipes/wsj_parsing/small.sh
#
# Settings (environment): PTB (the sample folder; default $VTX_SHARED_DATA/ptb_sample, by default
# ../shared/data/ptb_sample beside the checkout), WORK (runs/wsj_small; replaced), STEPS (1200
# updates of ~2k tokens, about 12 epochs), NUM_LAST (3 checkpoints averaged), DEV (the dev files, a
# glob in PTB: wsj_01[67][0-9].mrg).
# Expect a low F1: 3.4K training sentences are a tenth of WSJ sections 02-21.
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/common.sh"
PTB=${PTB:-${VTX_SHARED_DATA:-$ROOT/../shared/data}/ptb_sample}
WORK=${WORK:-$ROOT/runs/wsj_small}
STEPS=${STEPS:-1200}
DEV=${DEV:-wsj_01[67][0-9].mrg}

check_vtx
compgen -G "$PTB/wsj_0001.mrg" > /dev/null && compgen -G "$PTB/$DEV" > /dev/null ||
  die "no wsj_0001.mrg or no dev file $DEV in '$PTB' (set PTB, DEV)"
START=$(date +%s)
rm -rf "$WORK"
step "linearizing the sample into $WORK/text"
"$VTX" prepare-parse --train-files "$PTB/wsj_00[0-9][0-9].mrg" \
  --train-files "$PTB/wsj_01[0-5][0-9].mrg" --valid-files "$PTB/$DEV" \
  --destdir "$WORK/text"
step "binarizing into $WORK/data (2000-piece vocabulary: the sample is small)"
preprocess_trees "$WORK/text" "$WORK/data" 2000
step "training a small model for $STEPS steps"
# tiny preset widened to d_model 128: 2 layers, 4 heads, d_ff 512. Small batches and a short
# warmup give many updates in minutes; at the schedule's full rate (peak 4.4e-3 for d_model 128,
# warmup 400) the decoder learnt trees but ignored the source (the same tree for every sentence,
# dev F1 0.53 after 800 steps of 4k tokens), at 0.3 of it the outputs follow the sentence.
"$VTX" train "$WORK/data" --arch tiny --d-model 128 --d-ff 512 --heads 4 --dropout 0.1 \
  --save-dir "$WORK/checkpoints" --max-steps "$STEPS" --max-tokens 2048 --warmup-steps 400 \
  --lr-scale 0.3 \
  --save-interval-minutes 0 --save-interval-steps 100 --validate-interval-steps 200 \
  --log-interval-steps 50
step "averaging the last ${NUM_LAST:-3} checkpoints"
"$VTX" average-checkpoints --inputs "$WORK/checkpoints" --num-last "${NUM_LAST:-3}" \
  --output "$WORK/average.npz" --force
step "parsing the dev set (beam 21, alpha 0.3, max length input + 300)"
parse_and_score "$WORK/average.npz" "$WORK/text" valid "$WORK/valid.parsed"
echo "wall time: $(( $(date +%s) - START )) s"
