#!/usr/bin/env bash
# Average the last checkpoints, parse sections 22 (valid) and 23 (test) with the paper's decoding
# (beam 21, alpha 0.3, max length input + 300) and score them as EVALB with COLLINS.prm does.
#
#   bash recipes/wsj_parsing/evaluate.sh [extra vtx parse flags, e.g. --jit]
#
# Settings (environment): WORK (runs/wsj_parsing), NUM_LAST (20, as for the paper's big models).
# Writes $WORK/{valid,test}.parsed (one tree per line, gold POS tags: see the README) and
# {valid,test}.parsed.log (vtx parse's messages and EVALB summary); prints both F1s (the paper:
# 91.3 on section 23).
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/common.sh"
help_if_asked "$@"
WORK=${WORK:-$ROOT/runs/wsj_parsing}

check_vtx
[ -d "$WORK/checkpoints" ] || die "no $WORK/checkpoints: run train.sh first"
step "averaging the last ${NUM_LAST:-20} checkpoints"
"$VTX" average-checkpoints --inputs "$WORK/checkpoints" --num-last "${NUM_LAST:-20}" \
  --output "$WORK/average.npz" --force
for prefix in valid test; do
  step "parsing $prefix"
  parse_and_score "$WORK/average.npz" "$WORK/text" "$prefix" "$WORK/$prefix.parsed" "$@"
done
