#!/usr/bin/env bash
# vtx's GPU measurements as one call of the device tool: each part in order, started only when
# the seconds left allow it, each under `timeout`, its log in $OUT (which comes back even when
# the call runs out of time). The figures they give are in docs/benchmarks.md.
#
#   bash benchmarks/gpu_session.sh DATA_DIR [SECONDS=480]
#
# Each part's line in the summary is followed by the GPU's state over it (nvidia-smi sampled
# every 2 s: SM clock, power, temperature, share of time running kernels).
#
#   pipeline   `vtx train` on DATA_DIR (Multi30k, vocabulary 8000), base, 8192 tokens, XLA,
#              packed, 1 minute of updates (gpu_pipeline.sh): the shapes' compile total and the
#              steady tok/s, against synthetic's rate. Updates PROFILE_STEPS (default
#              1000:1009) are traced by TensorFlow's profiler (vtx train --profile) and
#              summarized (xplane_summary.py): the device's busy and idle time an update (idle:
#              waiting for the host) and its kernel time by kind
#   resume     pipeline's run resumed for 15 s: compiled programs from the persistent XLA cache,
#              so "compiled N batch shapes in T s" is a resumed run's wait
#   synthetic  gpu_train.py, base with pipeline's vocabulary (8000) at 8192 tokens of 128 x 64,
#              no padding: the synthetic rate on this GPU, pipeline's denominator; 500 updates,
#              as a GPU kept busy may clock lower than for a few. Timed again as vtx train's
#              loop reads each update (--in-flight 0,2) and with each batch placed on the
#              training thread as its update starts (--prefetch 2,0): what reading each update
#              costs, and what placing the batches ahead on a thread saves; then 10 more
#              updates profiled as pipeline's are
#   inline     pipeline's run again, fresh (its own save dir) for 30 s of updates with
#              --prefetch 0, each batch made and placed on the training thread, its programs from
#              pipeline's XLA cache: the read-ahead thread's worth on the real pipeline (run
#              after pipeline, so on a GPU kept busy longer: compare with its clock line)
#   packed     the same packed 4 pairs a row: the packed layout's cost (segment masks) against
#              synthetic; also timed as vtx train's loop reads each update (--in-flight 0,2)
#   big        gpu_train.py, big at 16384 tokens, 10 updates, profiled: MFU and where the
#              update's time goes on the device
#   autotune   gpu_train.py, base (vocabulary 8000) compiled in two fresh processes that keep
#              XLA's autotuning in one --xla_gpu_per_fusion_autotune_cache_dir: the second's
#              compile seconds against the first's
#   nojit      base at 8192 tokens without XLA in float32, then mixed_bfloat16: whether
#              bfloat16 is slower there (why `--precision auto` takes float32 with --no-jit)
#   float16    synthetic's run (no profile, at most 2 in flight) in mixed_float16, whose loss
#              scale is kept by selection: its tok/s against synthetic's bfloat16 (GPUs without
#              bfloat16 train in float16)
#   decode     translate_speed.py on pipeline's last checkpoint (base after its minute), the
#              first 512 lines of DATA_DIR/test.en (Multi30k test_2016, English: staged below),
#              beam 4, with XLA then without. DECODE_FLAGS are appended (e.g. --limit,
#              --max-tokens)
#   ct2        translate_speed.py --ctranslate2 on the same checkpoint, 1000 lines of
#              DATA_DIR/test.en, beam 4: vtx (vtx translate's search, no XLA) against
#              CTranslate2 on the GPU at each setting of its default sweep (compute types,
#              batch types, max batch sizes): the table, the fastest setting and vtx against it;
#              the rows in $OUT/decoding_vs_ct2.csv (benchmarks/results/decoding_vs_ct2.csv's
#              columns). Needs CTranslate2's wheel staged (VTX_GPU_EXTRA_WHEELS=
#              "ctranslate2==4.8.5", below); DECODE_FLAGS are appended (--jit: vtx under XLA)
#   bleu       recipes/quickstart.sh on the GPU (VTX_BIN: the staged vtx) with a budget of
#              BLEU_MINUTES (default 4) on the raw Multi30k in DATA_DIR/raw (staged below):
#              BLEU on test_2016 after that many minutes of training, compile included, and
#              the recipe's seconds end to end. Its averaged checkpoint is what decode and ct2
#              translate with (the quick start's model) unless CHECKPOINT names another
#   replicas8  gpu_replicas.py: the GPU split into 8 logical GPUs (MirroredStrategy, XLA, bf16,
#              the sum across replicas reduced to one device: NCCL needs distinct GPUs), base
#              (vocabulary 8000) at 8192 tokens a replica, 30 updates: tok/s of 8 replicas
#              against 1 replica and 1 replica x 8 micro-batches, and the weights of 8 replicas
#              against 1 x 8 micro-batches on the same batches, with the round-off's floor
#              (1 x 8 again, reversed), exit 1 beyond them; each run in a process of its own.
#              Each program is compiled once per logical GPU; they are kept in
#              $RUN.replicas8_xla, so that a second call finds them
#
# decode and ct2 translate with CHECKPOINT (a vtx checkpoint file) when given, else part bleu's
# averaged checkpoint, else pipeline's last checkpoint.
#
# A part starts only when the seconds left cover what it took the last time it was measured
# (benchmarks/gpu_session_seconds.csv, or the file GPU_SESSION_SECONDS names: part,
# seconds, exit, GPU, date; its default where absent). Each run writes its parts' rows to
# $OUT/gpu_session_seconds.csv (a part that did not run: exit "skipped"): copy them over the
# file's rows of the same part.
#
# The traces' device side needs CUDA 12's CUPTI, which the GPU machine may lack (without it they
# hold the host's events only, and xplane_summary says /host:CPU): stage its wheel in the last
# part,
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64
#     -d .gpu/wLAST nvidia-cuda-cupti-cu12==12.8.90          (10 MB; setup.sh installs it)
# (this script puts its library directory on LD_LIBRARY_PATH when setup.sh installed it).
#
# To run it, first here: `VTX_GPU_EXTRA_WHEELS="ctranslate2==4.8.5" bash ../shared/gpu/stage.sh`
# (CTranslate2 for part ct2, a part of its own), and the data: `vtx preprocess -s en -t de
# --trainpref ../shared/data/multi30k/train --validpref ../shared/data/multi30k/val --destdir
# .gpu/m30k --vocab-size 8000`, `zcat ../shared/data/multi30k/test_2016_flickr.en.gz >
# .gpu/m30k/test.en` (parts decode, ct2) and `mkdir .gpu/m30k/raw && cp
# ../shared/data/multi30k/*.gz .gpu/m30k/raw/` (part bleu: 1.3 MB). Then with the device tool, back to back: one call per part
# .gpu/wNN but the last (command `mkdir -p /root/stash && mv .gpu/wNN/* /root/stash/`, carry
# [".gpu/wNN"]), then the last part with this (carry [".gpu/wLAST", ".gpu/bin", ".gpu/m30k"],
# under the 64 MiB a call carries):
#   mkdir -p /root/stash && mv .gpu/wLAST/* /root/stash/ && bash .gpu/bin/setup.sh &&
#   . .gpu/bin/env.sh && bash benchmarks/gpu_session.sh .gpu/m30k 480
# Device time is scarce: check any other command on this CPU first, as a typo costs the device
# time it took to stage.
#
# PARTS picks the parts and their order (default "replicas8 bleu ct2 decode big pipeline
# synthetic packed autotune nojit resume inline float16", the most wanted first: resume and
# inline need pipeline's run, decode and ct2 a checkpoint). The machine stays warm a while after a call: a second call then (no staging; setup.sh
# checks and goes on) runs the parts the first had no time for. PIPELINE_FLAGS, GPU_TRAIN_FLAGS
# (replicas8 too) and DECODE_FLAGS (decode, ct2) are appended to the parts' commands (the last
# value of a flag wins); on a CPU, to check the script itself (its figures mean nothing there):
#   PROFILE_STEPS=5:8 PIPELINE_FLAGS="--jit --layers 1 --d-model 64 --d-ff 128 --heads 2 --max-tokens 512" \
#   GPU_TRAIN_FLAGS="--device cpu --archs tiny --tokens 512 --length 16 --steps 3 --warmup 1" \
#   DECODE_FLAGS="--limit 16" bash benchmarks/gpu_session.sh /tmp/m30k 600
set -uo pipefail
data=${1:?DATA_DIR: a vtx preprocess output (Multi30k, vocabulary 8000)}
budget=${2:-480}
[ -d "$data" ] || { echo "gpu_session: DATA_DIR $data is not a directory" >&2; exit 2; }
[[ $budget =~ ^[0-9]+$ ]] \
  || { echo "gpu_session: SECONDS must be a whole number, not $budget" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-/tmp}; mkdir -p "$out"
export OUT=$out RUN=${RUN:-/root/gpu_session_run}
summary=$out/gpu_session_summary.txt
started=$SECONDS
read -ra pipeline_flags <<< "${PIPELINE_FLAGS:-}"
read -ra train_flags <<< "${GPU_TRAIN_FLAGS:-}"
read -ra decode_flags <<< "${DECODE_FLAGS:-}"
PROFILE_STEPS=${PROFILE_STEPS:-1000:1009}
[[ $PROFILE_STEPS =~ ^[0-9]+:[0-9]+$ ]] \
  || { echo "gpu_session: PROFILE_STEPS must be FIRST:LAST, not $PROFILE_STEPS" >&2; exit 2; }
default_parts="replicas8 bleu ct2 decode big pipeline synthetic packed autotune nojit resume \
inline float16"
read -ra parts <<< "${PARTS:-$default_parts}"
for name in "${parts[@]}"; do
  case $name in
    pipeline|resume|synthetic|inline|packed|big|autotune|nojit|float16|decode|ct2|replicas8|\
bleu) ;;
    *) echo "gpu_session: PARTS: unknown part $name (pipeline resume synthetic inline packed" \
         "big autotune nojit float16 decode ct2 replicas8 bleu)" >&2; exit 2 ;;
  esac
done
python=$(command -v python3 || command -v python)
cupti=/tmp/site/nvidia/cuda_cupti/lib  # CUDA 12's CUPTI, staged as the header says
[ -d "$cupti" ] && export LD_LIBRARY_PATH=$cupti${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

note() { echo "$*" | tee -a "$summary"; }

# expected NAME DEFAULT: the seconds part NAME took when last measured (the newest row of
# $measured whose exit was 0), else DEFAULT.
measured=${GPU_SESSION_SECONDS:-$here/gpu_session_seconds.csv}
expected() {
  local seconds
  seconds=$(awk -F, -v part="$1" '$1 == part && $3 == 0 { s = $2 } END { print s }' \
    "$measured" 2>/dev/null)
  echo "${seconds:-$2}"
}

# skipped NAME WHY...: says that part NAME did not run and why, in the summary and as a row of
# the seconds' file (exit "skipped").
skipped() {
  local name=$1; shift
  note "== $name: skipped, $*"
  echo "$name,0,skipped,$gpu,$(date -u +%F)" >> "$out/gpu_session_seconds.csv"
}

# part NAME SECONDS_NEEDED COMMAND...: runs COMMAND under the time left, its output in
# $OUT/NAME.log, unless less is left than the seconds NAME took when last measured (else
# SECONDS_NEEDED).
part() {
  local name=$1 need; need=$(expected "$1" "$2"); shift 2
  local left=$(( budget - (SECONDS - started) ))
  if (( left < need )); then
    skipped "$name" "$left s left (needs about $need)"
    return 0
  fi
  note "== $name ($left s left): $*"
  local began=$SECONDS rc from
  from=$(wc -l < "$clocks")
  written+=("$name.log")
  # In the background, so that a signal to this script (its trap, below) reaches the part:
  # timeout runs it in a process group of its own, which a Ctrl-C here would not reach.
  timeout -k 20 "$left" "$@" > "$out/$name.log" 2>&1 &
  running=$!
  wait "$running"
  rc=$?
  running=""
  local why=""; (( rc == 124 || rc == 137 )) && why=" (out of time)"
  note "== $name: exit $rc after $(( SECONDS - began )) s$why"
  echo "$name,$(( SECONDS - began )),$rc,$gpu,$(date -u +%F)" >> "$out/gpu_session_seconds.csv"
  tail -n +$(( from + 1 )) "$clocks" | gpu_samples | tee -a "$summary"
}

# The GPU's state over a part, from nvidia-smi's samples (below): a clock under its maximum is
# power or heat (a long run is slower than a short one), utilization under 100% the GPU waiting
# for the host.
gpu_samples() {
  awk -F', *' 'NF >= 6 && $2 + 0 > 0 { n++; clock += $2; max = $3; watts += $4; heat = $5
                                         busy += $6 }
    END { if (n) printf "   GPU over the part: SM clock %.0f MHz of %s, %.0f W, %s C at its" \
                        " end, kernels running %.0f%% of the time (%d samples)\n", clock / n,
                        max, watts / n, heat, busy / n, n }'
}

: > "$summary"
written=(gpu_pipeline_train.log gpu_pipeline_resume.log gpu_pipeline_train_inline.log
         gpu_clocks.csv)  # the logs, for the tar
echo "part,seconds,exit,gpu,date" > "$out/gpu_session_seconds.csv"
clocks=$out/gpu_clocks.csv sampler=""
: > "$clocks"
if command -v nvidia-smi > /dev/null; then  # a sample every 2 s until the session ends
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.max.sm,power.draw,temperature.gpu,\
utilization.gpu --format=csv,noheader,nounits -l 2 >> "$clocks" 2> /dev/null &
  sampler=$!
fi
running=""  # the part under way: timeout's pid
trap '[ -n "$sampler" ] && kill "$sampler" 2> /dev/null' EXIT
# Stopped by hand (Ctrl-C, kill): the part under way is stopped too (timeout passes the signal
# on), then the session ends with what it has.
trap '[ -n "$running" ] && kill -TERM "$running" 2> /dev/null && wait "$running"
      echo "gpu_session: stopped by a signal" >&2; exit 130' INT TERM
commit=$(git -C "$here/.." rev-parse --short HEAD 2>/dev/null || echo unknown)
note "gpu_session $(date -u +%FT%TZ), budget $budget s, data $data, commit $commit"
gpu="CPU"  # the seconds' rows name the device they were measured on
if command -v nvidia-smi > /dev/null; then
  gpu=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1)
  note "gpu: $gpu"
  gpu=${gpu%%,*}
else
  note "gpu: none (no nvidia-smi): the figures below are this CPU's"
fi

do_pipeline() {
  part pipeline 240 bash "$here/gpu_pipeline.sh" train "$data" 1 --profile "$PROFILE_STEPS" \
    "${pipeline_flags[@]}"
  grep -hE "precision:|batch shapes|packed, several pairs|compiled [0-9]+ batch shapes|\| tok/s" \
    "$out/gpu_pipeline_train.log" 2>/dev/null | sed -n '1,8p;$p' | tee -a "$summary"
  # Where the traced updates' time went on the device, and how long it waited for the host.
  local first=${PROFILE_STEPS%%:*} last=${PROFILE_STEPS##*:}
  [ -d "$RUN/profile" ] && "$python" "$here/xplane_summary.py" "$RUN/profile" --top 12 \
    --updates $(( last - first + 1 )) 2>&1 | grep -v "^WARNING\|^[IWE]0000\|^To enable" \
    | tee -a "$summary"
}

do_synthetic() {
  part synthetic 200 "$python" "$here/gpu_train.py" --archs base --tokens 8192 --vocab 8000 \
    --steps 500 --no-reference --in-flight 0,2 --prefetch 2,0 --profile "$RUN.synthetic_prof" \
    --profile-steps 10 "${train_flags[@]}"
  grep -A4 "^arch " "$out/synthetic.log" 2>/dev/null | tee -a "$summary"
  grep -A20 "^profile of" "$out/synthetic.log" 2>/dev/null | tee -a "$summary"
}

do_big() {
  part big 200 "$python" "$here/gpu_train.py" --archs big --tokens 16384 --steps 10 \
    --no-reference --profile "$RUN.prof" "${train_flags[@]}"
  grep -A30 "^arch " "$out/big.log" 2>/dev/null | tee -a "$summary"
}

do_packed() {
  part packed 160 "$python" "$here/gpu_train.py" --archs base --tokens 8192 --vocab 8000 \
    --packed 4 --steps 500 --no-reference --in-flight 0,2 "${train_flags[@]}"
  grep -A2 "^arch " "$out/packed.log" 2>/dev/null | sed -n 2,3p | tee -a "$summary"
}

do_inline() {
  part inline 100 env TAG=inline RUN="$RUN.inline" bash "$here/gpu_pipeline.sh" train "$data" \
    0.5 --prefetch 0 --xla-cache-dir "$RUN/xla_cache" "${pipeline_flags[@]}"
  grep -hE "compiled [0-9]+ batch shapes|\| tok/s" "$out/gpu_pipeline_train_inline.log" \
    2>/dev/null | sed -n '1p;$p' | tee -a "$summary"
}

do_resume() {
  part resume 90 bash "$here/gpu_pipeline.sh" resume "$data" 0.25 "${pipeline_flags[@]}"
  grep -hE "compiled [0-9]+ batch shapes|\| tok/s" "$out/gpu_pipeline_resume.log" 2>/dev/null \
    | sed -n '1,2p' | tee -a "$summary"
}

# `auto` takes float32 on a GPU without XLA (--no-jit), where bfloat16 trained slower: checked
# on this code when time is left.
do_nojit() {
  local precision
  for precision in float32 mixed_bfloat16; do
    part "nojit_$precision" 60 "$python" "$here/gpu_train.py" --archs base --tokens 8192 \
      --no-jit --precision "$precision" --steps 20 --no-reference "${train_flags[@]}"
    grep -A1 "^arch " "$out/nojit_$precision.log" 2>/dev/null | sed -n 2p | tee -a "$summary"
  done
}

do_float16() {
  part float16 150 "$python" "$here/gpu_train.py" --archs base --tokens 8192 --vocab 8000 \
    --steps 500 --no-reference --in-flight 2 --precision mixed_float16 "${train_flags[@]}"
  grep -A1 "^arch " "$out/float16.log" 2>/dev/null | sed -n 2p | tee -a "$summary"
}

# The checkpoint decode and ct2 translate with: $CHECKPOINT, else bleu's average, else
# pipeline's newest (none: empty).
decode_checkpoint() {
  if [ -n "${CHECKPOINT:-}" ]; then
    echo "$CHECKPOINT"
  elif [ -f "$RUN.bleu/average.npz" ]; then
    echo "$RUN.bleu/average.npz"
  else
    ls "$RUN"/checkpoint_[0-9]*.npz 2>/dev/null | sort | tail -n 1
  fi
}

# decode_inputs PART: sets the caller's `checkpoint` to the one to decode with; without it or
# $data/test.en, notes that PART is skipped and returns 1.
decode_inputs() {
  checkpoint=$(decode_checkpoint)
  if [ -z "$checkpoint" ] || [ ! -f "$checkpoint" ] || [ ! -f "$data/test.en" ]; then
    skipped "$1" "it needs a checkpoint (CHECKPOINT, part bleu's or pipeline's) and" \
      "$data/test.en"
    return 1
  fi
}

do_decode() {
  local checkpoint
  decode_inputs decode || return 0
  part decode 240 bash -c 'for jit in --jit --no-jit; do "$0" "$1/translate_speed.py" \
    --checkpoint "$2" --input "$3" --limit 512 --repeat 3 "$jit" "${@:4}" || exit; done' \
    "$python" "$here" "$checkpoint" "$data/test.en" "${decode_flags[@]}"
  grep -E "parameters|steady" "$out/decode.log" 2>/dev/null | tee -a "$summary"
}

# The quick start's recipe on this device: BLEU after BLEU_MINUTES of training, and the whole
# recipe's seconds (preprocess, compile, train, average, translate 1000 lines).
do_bleu() {
  local minutes=${BLEU_MINUTES:-4}
  if [ ! -d "$data/raw" ]; then
    skipped bleu "it needs the raw Multi30k in $data/raw (header)"
    return 0
  fi
  part bleu "$(awk -v m="$minutes" 'BEGIN { printf "%d", m * 60 + 150 }')" \
    env VTX_BIN="$(command -v vtx)" bash "$here/../recipes/quickstart.sh" --minutes "$minutes" \
    --data "$data/raw" --workdir "$RUN.bleu" ${BLEU_TEST_LINES:+--test-lines "$BLEU_TEST_LINES"}
  grep -E "^==> .*(vtx train|done in)|compiled [0-9]+ batch shapes|^Multi30k|^BLEU" \
    "$out/bleu.log" 2>/dev/null | tee -a "$summary"
}

# vtx against CTranslate2 on the GPU, same checkpoint and lines (translate_speed.py exports it).
do_ct2() {
  local checkpoint
  decode_inputs ct2 || return 0
  if ! "$python" -c "import ctranslate2" > /dev/null 2>&1; then
    skipped ct2 "no ctranslate2 (stage its wheel: VTX_GPU_EXTRA_WHEELS, header)"
    return 0
  fi
  part ct2 240 "$python" "$here/translate_speed.py" --checkpoint "$checkpoint" --input \
    "$data/test.en" --limit 1000 --repeat 2 --ctranslate2 --csv "$out/decoding_vs_ct2.csv" \
    "${decode_flags[@]}"
  written+=(decoding_vs_ct2.csv)
  local shown="parameters|^devices|^compute types skipped|steady state|^\||^fastest"
  grep -E "$shown|^steady call seconds|^vtx / CTranslate2" "$out/ct2.log" 2>/dev/null \
    | tee -a "$summary"
}

# 8 replicas on 8 logical GPUs of this one (gpu_replicas.py): tok/s against 1 replica, and the
# weights against 1 replica x 8 micro-batches.
do_replicas8() {
  part replicas8 300 "$python" "$here/gpu_replicas.py" --archs base --vocab 8000 --tokens 8192 \
    --steps 30 --xla-cache-dir "$RUN.replicas8_xla" "${train_flags[@]}"
  grep -E "^device:|compiled the update|tok/s|^first update|^weights|killed|exited" \
    "$out/replicas8.log" \
    2>/dev/null | tee -a "$summary"
}

# XLA's autotuner picks each matrix product's and fusion's kernel by timing candidates at compile
# time; XLA can keep its choices on disk. Two fresh runs of one program share the
# directory: the second's compile seconds say what a kept autotuning saves a new run.
do_autotune() {
  local cache=$RUN.autotune which
  rm -rf "$cache" && mkdir -p "$cache"
  for which in first second; do
    part "autotune_$which" 150 env XLA_FLAGS="${XLA_FLAGS:-} \
--xla_gpu_per_fusion_autotune_cache_dir=$cache" "$python" "$here/gpu_train.py" --archs base \
      --tokens 8192 --vocab 8000 --steps 10 --no-reference "${train_flags[@]}"
    grep -A1 "^arch " "$out/autotune_$which.log" 2>/dev/null | sed -n 2p | tee -a "$summary"
  done
  note "autotune cache: $(find "$cache" -type f | wc -l) files"
}

for name in "${parts[@]}"; do "do_$name"; done
# The device tool brings back 8 files of $OUT at most: the logs travel as one archive.
[ -n "$sampler" ] && kill "$sampler" 2> /dev/null
( cd "$out" && tar -czf gpu_session_logs.tar.gz --ignore-failed-read "${written[@]}" 2> /dev/null \
    && rm -f -- "${written[@]}" )
note "gpu_session: done after $(( SECONDS - started )) s; the summary and" \
  "gpu_session_logs.tar.gz (each part's log, nvidia-smi's samples) in $out"
