#!/usr/bin/env bash
# Transformer big: 300k steps of ~25k+25k tokens, average of the last 20 checkpoints.
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/config.sh"
source "$HERE/../lib/wmt14.sh"
ARCH=big STEPS=300000 DROPOUT=$BIG_DROPOUT NUM_LAST=20 SAVE_STEPS=600
train_main "$@"
