#!/usr/bin/env bash
# Quick start: Multi30k English->German on a CPU within a wall-time budget, end to end.
#
#   bash recipes/quickstart.sh [--minutes N] [--patience N] [--data DIR] [--workdir DIR]
#                              [--test-lines N]
#
#   --minutes N     training budget in minutes (default 60); `vtx train --max-minutes`
#   --patience N    stop before the budget when the validation loss has not improved in N
#                   validations, one every 250 updates (default 6; 0 trains the whole budget);
#                   `vtx train --patience`
#   --data DIR      a local Multi30k copy holding train/val/test_2016_flickr.{en,de}[.gz]
#                   (default: $MULTI30K_DIR, else $VTX_SHARED_DATA/multi30k -- by default
#                   ../shared/data/multi30k -- when present, else a download of the
#                   multi30k/dataset repository's data/task1/raw files, or of $MULTI30K_URL)
#   --workdir DIR   where data, checkpoints and translations go (default: runs/quickstart);
#                   running again resumes training there for another budget
#   --test-lines N  translate only the first N test sentences (smoke runs; default: all 1000)
#
# An option's value may not start with "--" (`--workdir --help` would take "--help" for the
# folder): give such a folder as ./--NAME.
#
# Steps: an isolated environment (.venv, reused when tests/run.sh made one), vtx installed in it,
# the data, `vtx preprocess`, `vtx train`, `vtx average-checkpoints`, `vtx translate --reference`
# on test_2016, which prints sacreBLEU with its signature.
# VTX_BIN=PATH uses that `vtx` instead (no environment made), as on a machine where vtx is
# installed already (benchmarks/gpu_session.sh's part bleu).
set -euo pipefail
# The rest is one block, read whole before it runs: an editor saving over this file while it
# runs (an hour's training) would otherwise make bash read on from a shifted offset.
{

ROOT=$(cd "$(dirname "$0")/.." && pwd)
MINUTES=60
PATIENCE=6
DATA=${MULTI30K_DIR:-}
WORK=$ROOT/runs/quickstart
TEST_LINES=0
MULTI30K_URL=${MULTI30K_URL:-https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw}
SHARED_DATA=${VTX_SHARED_DATA:-$ROOT/../shared/data}
SPLITS=(train val test_2016_flickr)
# TensorFlow's C++ start-up chatter would drown the progress lines.
export TF_CPP_MIN_LOG_LEVEL=${TF_CPP_MIN_LOG_LEVEL:-2}

die() { echo "quickstart: error: $*" >&2; exit 1; }
step() { echo "==> [$(date +%H:%M:%S)] $*" >&2; }
is_count() { [[ $1 =~ ^[0-9]+$ ]]; }
is_minutes() { [[ $1 =~ ^[0-9]+([.][0-9]+)?$ ]] && awk -v m="$1" 'BEGIN { exit !(m > 0) }'; }
# OPTION's VALUE, the argument after it: refused when missing, empty, or the next option
# (`--workdir --help` took "--help" for the folder and went on).
need_value() {  # OPTION WHAT VALUE [HINT]
  [ -n "$3" ] || die "$1 needs $2"
  [[ $3 != --* ]] || die "$1 needs $2, not the option '$3'${4:-}"
}

while [ $# -gt 0 ]; do
  case $1 in
    --minutes) need_value "$1" "a value" "${2-}"
      is_minutes "$2" || die "--minutes must be a positive number, got '$2'"; MINUTES=$2; shift 2 ;;
    --patience) need_value "$1" "a value" "${2-}"
      is_count "$2" || die "--patience must be a whole number, got '$2'"; PATIENCE=$2; shift 2 ;;
    --data) need_value "$1" "a directory" "${2-}" " (a folder of that name: ./${2-})"
      DATA=$2; shift 2 ;;
    --workdir) need_value "$1" "a directory" "${2-}" " (a folder of that name: ./${2-})"
      WORK=$2; shift 2 ;;
    --test-lines) need_value "$1" "a value" "${2-}"
      is_count "$2" || die "--test-lines must be a whole number, got '$2'"; TEST_LINES=$2; shift 2 ;;
    -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
# A split file is usable as PREFIX.LANG.gz or PREFIX.LANG (what `vtx preprocess` reads).
has_split_file() { [ -s "$1/$2.$3.gz" ] || [ -s "$1/$2.$3" ]; }
check_data_dir() {
  [ -d "$1" ] || die "$2: '$1' is not a directory"
  for split in "${SPLITS[@]}"; do for lang in en de; do
    has_split_file "$1" "$split" "$lang" || die "$2: '$1' has no $split.$lang.gz (or $split.$lang)"
  done; done
}
download_multi30k() {
  local dest=$1 name
  command -v curl > /dev/null || die "curl is needed to download Multi30k (or pass --data DIR)"
  mkdir -p "$dest"
  for split in "${SPLITS[@]}"; do for lang in en de; do
    name=$split.$lang.gz
    [ -s "$dest/$name" ] && continue
    step "downloading $name"
    curl -fsSL --show-error --retry 3 -o "$dest/$name.part" "$MULTI30K_URL/$name" \
      || die "download of $MULTI30K_URL/$name failed (pass --data DIR for a local copy)"
    gzip -t "$dest/$name.part" || die "$MULTI30K_URL/$name is not a gzip file"
    mv "$dest/$name.part" "$dest/$name"
  done; done
}
# A local copy is checked before anything is installed or written: a wrong --data is named at
# once, not after minutes of installing the environment.
if [ -n "$DATA" ]; then
  check_data_dir "$DATA" "--data/MULTI30K_DIR"
elif [ -d "$SHARED_DATA/multi30k" ]; then
  DATA=$SHARED_DATA/multi30k
  check_data_dir "$DATA" "shared data"
fi
# Absolute from here on: a folder named "-x" is never read as an option (mkdir, cd, gzip, cat).
mkdir -p -- "$WORK"
WORK=$(cd -- "$WORK" && pwd)
[ -z "$DATA" ] || DATA=$(cd -- "$DATA" && pwd)
START=$(date +%s)

# ---- 1. environment ----
if [ -n "${VTX_BIN:-}" ]; then
  [ -x "$VTX_BIN" ] || die "VTX_BIN: '$VTX_BIN' is not an executable file"
  VTX=$VTX_BIN
else
  VENV=$ROOT/.venv
  if [ ! -x "$VENV/bin/python" ]; then
    step "creating the virtual environment $VENV"
    "${PYTHON:-python3}" -m venv "$VENV"
  fi
  if [ ! -x "$VENV/bin/vtx" ]; then
    step "installing vtx and its dependencies into $VENV (a few minutes the first time)"
    "$VENV/bin/python" -m pip install -q --upgrade pip
    "$VENV/bin/python" -m pip install -q -e "$ROOT"
  fi
  VTX=$VENV/bin/vtx
fi

# ---- 2. data: the local copy checked above, else a download ----
if [ -z "$DATA" ]; then
  DATA=$WORK/multi30k
  download_multi30k "$DATA"
fi
step "Multi30k from $DATA"

# ---- 3. preprocess: joint SentencePiece BPE, 8000 ids ----
BIN=$WORK/data-bin
if [ -f "$BIN/meta.json" ]; then
  step "reusing $BIN"
else
  step "vtx preprocess -> $BIN"
  "$VTX" preprocess -s en -t de --trainpref "$DATA/train" --validpref "$DATA/val" \
    --testpref "$DATA/test_2016_flickr" --destdir "$BIN" --vocab-size 8000 --force
fi

# ---- 4. train for the budget ----
# The small preset was chosen on Multi30k val (docs/recipes.md): 3 layers, d_model 256; the
# precision follows the hardware (bfloat16 only where the CPU or GPU computes it faster).
# About 20 checkpoints over the budget; the last 5 are averaged. A CPU with bfloat16 makes
# ~7,500 updates in 60 minutes and the model overfits after ~4,000 (docs/results.md): patience
# stops it ~1,500 updates after its best validation loss, so the last 5 surround the best.
SAVE=$WORK/checkpoints
SAVE_EVERY=$(awk -v m="$MINUTES" 'BEGIN { print m / 20 }')
step "vtx train for up to $MINUTES minutes (patience $PATIENCE) -> $SAVE (log lines: step, loss, tokens/s, eta)"
"$VTX" train "$BIN" --save-dir "$SAVE" --arch base --layers 3 --d-model 256 --d-ff 1024 \
  --heads 4 --dropout 0.1 --precision auto --max-tokens 2048 --warmup-steps 800 \
  --max-minutes "$MINUTES" --save-interval-minutes "$SAVE_EVERY" --keep-last 10 \
  --log-interval-steps 50 --validate-interval-steps 250 --patience "$PATIENCE"

# ---- 5. average the last checkpoints ----
COUNT=$(find "$SAVE" -maxdepth 1 -name 'checkpoint_[0-9]*.npz' | wc -l)
[ "$COUNT" -gt 0 ] || die "training wrote no checkpoint into $SAVE"
LAST=$(( COUNT < 5 ? COUNT : 5 ))
step "vtx average-checkpoints: the last $LAST of $COUNT"
"$VTX" average-checkpoints --inputs "$SAVE" --num-last "$LAST" --output "$WORK/average.npz" --force

# ---- 6. translate test_2016 and score it ----
read_split() {  # split lang -> text on stdout
  if [ -f "$DATA/$1.$2.gz" ]; then gzip -dc "$DATA/$1.$2.gz"; else cat "$DATA/$1.$2"; fi
}
# sed reads to the end (head would stop early, and pipefail would report gzip's SIGPIPE).
LINES_KEPT='$'; [ "$TEST_LINES" -gt 0 ] && LINES_KEPT=$TEST_LINES
read_split test_2016_flickr en | sed -n "1,${LINES_KEPT}p" > "$WORK/test.en"
read_split test_2016_flickr de | sed -n "1,${LINES_KEPT}p" > "$WORK/test.de"
step "vtx translate $(wc -l < "$WORK/test.en") test_2016 sentences (beam 4, alpha 0.6)"
"$VTX" translate --checkpoint "$WORK/average.npz" --input "$WORK/test.en" \
  --output "$WORK/test.hyp.de" --force --reference "$WORK/test.de" 2> "$WORK/translate.log" \
  || { cat "$WORK/translate.log" >&2; die "vtx translate failed"; }
grep -E '^(BLEU|nrefs)' "$WORK/translate.log" > "$WORK/bleu.txt" \
  || { cat "$WORK/translate.log" >&2; die "no BLEU line in $WORK/translate.log"; }

step "done in $(( $(date +%s) - START )) s; translations in $WORK/test.hyp.de"
echo "Multi30k test_2016 EN->DE (training budget $MINUTES min):"
cat "$WORK/bleu.txt"
exit
}
