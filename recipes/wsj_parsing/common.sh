# Shared settings and helpers of the WSJ parsing recipes (sourced, not run).
# Only the vtx CLI and standard shell tools are called.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
VTX=${VTX:-$ROOT/.venv/bin/vtx}
# Fewer of TensorFlow's C++ start-up lines among the progress lines (2 drops the CPU-feature
# notice; the lines logged before absl's logging starts, oneDNN and cudart_stub, show anyway).
export TF_CPP_MIN_LOG_LEVEL=${TF_CPP_MIN_LOG_LEVEL:-2}

# The paper's decoding for parsing (section 6.3): beam 21, alpha 0.3, max length input + 300.
DECODE=(--beam 21 --lenpen 0.3 --max-len-a 1 --max-len-b 300)

die() { echo "$(basename "$0"): error: $*" >&2; exit 1; }
step() { echo "==> [$(date +%H:%M:%S)] $*" >&2; }
check_vtx() { [ -x "$VTX" ] || die "no vtx at $VTX: run 'bash tests/run.sh' (or set VTX=path/to/vtx)"; }
# -h/--help among a script's arguments (before any "--"): its header comment, and exit 0 before
# it touches anything (small.sh replaces its WORK folder).
help_if_asked() {
  local arg
  for arg in "$@"; do
    case $arg in
      -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
      --) return ;;
    esac
  done
}

# vtx preprocess for words -> linearized trees. The bracket tokens stay whole pieces
# (--whole-word-symbols); a tree is 2-4x its sentence in tokens, so the length-ratio filter is
# raised far above that to drop no training pair (the paper filters none).
# VOCAB: a size (a new vocabulary) or an earlier run's SentencePiece model (reused whole, brackets
# included, so that a model trained on that vocabulary can go on training on this data).
preprocess_trees() {  # text_dir data_dir vocab [extra preprocess flags...]
  local text=$1 data=$2 vocab=$3
  shift 3
  local pieces=(--vocab-size "$vocab" --whole-word-symbols "$text/brackets.txt")
  [ -f "$vocab" ] && pieces=(--spm-model "$vocab")
  "$VTX" preprocess -s words -t trees --trainpref "$text/train" --validpref "$text/valid" \
    --destdir "$data" "${pieces[@]}" --max-length-ratio 20 --max-positions 1024 --force "$@"
}

# vtx parse of PREFIX.words against PREFIX.gold into OUT (one tree per line); its messages and
# EVALB summary are shown and kept in OUT.log, then "PREFIX F1 (all sentences): X" is printed.
parse_and_score() {  # checkpoint text_dir prefix out [extra parse flags...]
  local checkpoint=$1 text=$2 prefix=$3 out=$4
  shift 4
  "$VTX" parse --checkpoint "$checkpoint" --input "$text/$prefix.words" \
    --gold "$text/$prefix.gold" --output "$out" --force "${DECODE[@]}" "$@" 2>&1 | tee "$out.log"
  echo "$prefix F1 (all sentences): $(awk '/Bracketing FMeasure/ { print $4; exit }' "$out.log")"
}
