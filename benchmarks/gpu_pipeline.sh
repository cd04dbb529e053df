#!/usr/bin/env bash
# The real pipeline on a GPU: `vtx train` on a preprocessed data directory
# (Multi30k: `vtx preprocess` with a vocabulary of 8000, carried to the GPU machine), base,
# 8192 tokens, XLA, precision and packing (--pack with --jit) by default, every log line
# timestamped; pass --no-pack for the length buckets.
#
#   bash benchmarks/gpu_pipeline.sh train DATA_DIR [MINUTES=4] [extra vtx train flags...]
#       a fresh run: the batch shapes, each shape's compile line and their total, then the
#       progress lines (tok/s over 50 updates) until the time budget saves and stops it
#   bash benchmarks/gpu_pipeline.sh resume DATA_DIR [MINUTES=1] [extra flags...]
#       the same run resumed: its programs come from the persistent XLA cache in the save dir,
#       so "compiled N batch shapes in T s" is the time a resumed run waits before updating
#
# On the GPU machine after ../shared/gpu/README.md's setup (`. .gpu/bin/env.sh` defines `vtx`);
# each call stays under the device tool's 10 minutes a command when MINUTES leaves room for the
# compile (a minute or two a shape for base, one at a time). Logs go to $OUT (default /tmp) as
# gpu_pipeline_train.log or _resume.log (with $TAG set: gpu_pipeline_train_$TAG.log), the run to
# $RUN (default /root/gpu_pipeline). Summary lines at the end: compile, first and last rates.
set -uo pipefail
what=${1:?train or resume}; data=${2:?DATA_DIR}; minutes=${3:-}; shift $(( $# < 3 ? $# : 3 ))
run=${RUN:-/root/gpu_pipeline}; out=${OUT:-/tmp}
case $what in
  train) rm -rf "$run"; minutes=${minutes:-4} ;;
  resume) minutes=${minutes:-1} ;;
  *) echo "gpu_pipeline: train or resume, not $what" >&2; exit 2 ;;
esac
log=$out/gpu_pipeline_$what${TAG:+_$TAG}.log
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
start=${EPOCHREALTIME/./}  # microseconds (bash 5)
# Timestamps in seconds since the command started; grep --line-buffered so that a killed run
# keeps every line it printed.
vtx train "$data" --save-dir "$run" --arch base --max-tokens 8192 --max-minutes "$minutes" \
    --warmup-steps 1000 --log-interval-steps 50 --validate-interval-steps 0 \
    --save-interval-minutes 0 "$@" 2>&1 \
  | grep --line-buffered -v "^WARNING\|^I0000\|^W0000\|^E0000" \
  | while IFS= read -r line; do
      now=${EPOCHREALTIME/./}
      printf '%5d.%d s  %s\n' $(( (now - start) / 1000000 )) $(( (now - start) / 100000 % 10 )) "$line"
    done | tee "$log"
echo "== summary ($what, $minutes minutes)"
grep -E "batch shapes|padding:|packed, several pairs|compiled [0-9]+ batch shapes|precision:" "$log"
grep -E "\| tok/s" "$log" | head -2
grep -E "\| tok/s" "$log" | tail -2
