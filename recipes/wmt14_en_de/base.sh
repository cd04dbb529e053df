#!/usr/bin/env bash
# Transformer base: 100k steps of ~25k+25k tokens, P_drop 0.1, average of the last 5 checkpoints.
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/config.sh"
source "$HERE/../lib/wmt14.sh"
ARCH=base STEPS=100000 DROPOUT=0.1 NUM_LAST=5 SAVE_STEPS=1500
train_main "$@"
