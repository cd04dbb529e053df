#!/usr/bin/env bash
# newstest2014 BLEU of a checkpoint: detokenized sacreBLEU and the paper's tokenized BLEU.
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/config.sh"
source "$HERE/../lib/wmt14.sh"
evaluate_main "$@"
