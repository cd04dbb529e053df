#!/usr/bin/env bash
# WSJ parsing data: the Penn Treebank's standard split -> linearized text -> binarized data.
#
#   bash recipes/wsj_parsing/prepare.sh TREEBANK_DIR
#
# It takes no options but -h/--help ("-- TREEBANK_DIR" for a folder whose name starts with "-").
# TREEBANK_DIR is the LDC layout holding wsj/SS/wsj_SSNN.mrg (or the wsj folder itself):
# train = sections 02-21 (~40K sentences), valid = 22, test = 23. Writes $WORK/text
# (PREFIX.words/.trees/.gold, brackets.txt) and $WORK/data (16K joint vocabulary, as the paper).
# WORK defaults to runs/wsj_parsing; SLOTS (xx, the paper's linearization) is what stands for each
# word in the trees (vtx prepare-parse --slots; `words` is what the treebank sample needed, see
# README.md); SUBTREES (0: N > 0 also trains on every phrase of >= N words as a pair of its own,
# vtx prepare-parse --train-subtrees; 8 is the treebank sample's choice).
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/common.sh"
help_if_asked "$@"
WORK=${WORK:-$ROOT/runs/wsj_parsing}

USAGE="usage: $0 TREEBANK_DIR"
for arg in "$@"; do  # an option was reported as a treebank folder that does not exist
  case $arg in
    --) break ;;
    -?*) die "unknown option '$arg'; $USAGE" ;;
  esac
done
[ "${1-}" != -- ] || shift  # "-- DIR": a folder whose name starts with "-"
[ $# -eq 1 ] || die "$USAGE"
[ -d "$1" ] || die "treebank folder '$1' does not exist"
check_vtx
step "linearizing the treebank into $WORK/text"
"$VTX" prepare-parse --treebank "$1" --destdir "$WORK/text" --slots "${SLOTS:-xx}" \
  --train-subtrees "${SUBTREES:-0}" --force
step "binarizing into $WORK/data"
preprocess_trees "$WORK/text" "$WORK/data" 16000 --testpref "$WORK/text/test" --workers 4
