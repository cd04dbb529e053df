# Shared steps of the WMT14 recipes (sourced by recipes/wmt14_en_*/*.sh; not run directly).
#
# A recipe sets, before sourcing this file:
#   SRC, TGT      language codes (en, de | fr)
#   PAIR          the test-full tag of newstest2014 (deen | fren)
#   VOCAB_SIZE    joint SentencePiece vocabulary (37000 | 32000)
#   URLS          archives to download
#   CORPORA       training corpus prefixes inside the unpacked archives (PREFIX.LANG[.gz])
# Only the vtx CLI and standard tools (curl, tar, gzip, perl, python) are called.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
VTX=${VTX:-$ROOT/.venv/bin/vtx}
PYTHON=${VTX_PYTHON:-$(dirname "$VTX")/python}
WORK=${WORK:-$ROOT/runs/wmt14_${SRC}_${TGT}}
# The paper's batch: about 25,000 source and 25,000 target tokens per step over all GPUs.
TOKENS_PER_STEP=25600

die() { echo "$(basename "$0"): error: $*" >&2; exit 1; }
step() { echo "==> [$(date +%H:%M:%S)] $*" >&2; }
need_value() { [ "$2" -ge 2 ] && [ -n "$3" ] || die "$1 needs a value"; }  # flag $# value
is_count() { [[ $1 =~ ^[1-9][0-9]*$ ]]; }
check_vtx() { [ -x "$VTX" ] || die "no vtx at $VTX: run 'bash tests/run.sh' (or set VTX=path/to/vtx)"; }

# ---- prepare ----

# Text of PREFIX.LANG or PREFIX.LANG.gz on stdout.
read_text() {
  if [ -f "$1.gz" ]; then gzip -dc "$1.gz"; elif [ -f "$1" ]; then cat "$1"
  else die "missing $1 (or $1.gz)"; fi
}

# Segments of a WMT SGML file, one a line, as sacreBLEU extracts them.
read_sgm() {
  [ -f "$1" ] || die "missing $1"
  perl -CSD -ne 'print "$1\n" if /^<seg[^>]*>(.*)<\/seg>/' "$1"
}

# Normalisation: no carriage returns or other control characters, whitespace runs (Unicode
# included, e.g. no-break spaces) become one space, no leading or trailing space.
normalise() {
  perl -CSD -pe 's/[\x{0}-\x{8}\x{B}-\x{1F}\x{7F}]//g; s/\s+/ /g; s/^ //; s/ $//; $_ .= "\n"'
}

download_archives() {  # dest
  local dest=$1 name
  command -v curl > /dev/null || die "curl is needed for the downloads (or pass --local DIR)"
  mkdir -p "$dest/archives"
  for url in "${URLS[@]}"; do
    name=$(basename "$url")
    if [ ! -s "$dest/archives/$name" ]; then
      step "downloading $url"
      curl -fSL --retry 3 -o "$dest/archives/$name.part" "$url" || die "download of $url failed"
      mv "$dest/archives/$name.part" "$dest/archives/$name"
    fi
    [ -f "$dest/orig/.unpacked-$name" ] && continue  # a rerun skips the slow giga-fren tar
    step "unpacking $name"
    tar -xf "$dest/archives/$name" -C "$dest/orig" || die "cannot unpack $dest/archives/$name"
    touch "$dest/orig/.unpacked-$name"
  done
}

# PREFIX.LANG of one corpus, both sides, after checking they are parallel.
append_corpus() {  # orig prefix out_dir
  local src_lines tgt_lines
  src_lines=$(read_text "$1/$2.$SRC" | wc -l)
  tgt_lines=$(read_text "$1/$2.$TGT" | wc -l)
  [ "$src_lines" -eq "$tgt_lines" ] \
    || die "$1/$2: $src_lines $SRC lines but $tgt_lines $TGT lines"
  step "corpus $2: $src_lines pairs"
  read_text "$1/$2.$SRC" | normalise >> "$3/train.$SRC"
  read_text "$1/$2.$TGT" | normalise >> "$3/train.$TGT"
}

# newstest2013 (dev): plain text when the archive has it, else its SGML.
write_valid() {  # orig out_dir
  for lang in "$SRC" "$TGT"; do
    if [ -f "$1/dev/newstest2013.$lang" ]; then
      normalise < "$1/dev/newstest2013.$lang" > "$2/valid.$lang"
    else
      local kind=ref; [ "$lang" = "$SRC" ] && kind=src
      read_sgm "$1/dev/newstest2013-$kind.$lang.sgm" | normalise > "$2/valid.$lang"
    fi
  done
}

write_test() {  # orig out_dir -- newstest2014, the full 3003-sentence set
  read_sgm "$1/test-full/newstest2014-$PAIR-src.$SRC.sgm" | normalise > "$2/test.$SRC"
  read_sgm "$1/test-full/newstest2014-$PAIR-ref.$TGT.sgm" | normalise > "$2/test.$TGT"
  [ "$(wc -l < "$2/test.$SRC")" -eq "$(wc -l < "$2/test.$TGT")" ] \
    || die "newstest2014 $SRC and $TGT have different segment counts"
}

# Every file prepare reads, checked before any is read: a missing one is named at once, not
# after hours of normalising the corpora before it (and no half-written raw text is left).
check_inputs() {  # orig
  local corpus lang kind
  for corpus in "${CORPORA[@]}"; do for lang in "$SRC" "$TGT"; do
    [ -f "$1/$corpus.$lang" ] || [ -f "$1/$corpus.$lang.gz" ] \
      || die "missing $1/$corpus.$lang (or $1/$corpus.$lang.gz)"
  done; done
  for lang in "$SRC" "$TGT"; do
    kind=ref; [ "$lang" = "$SRC" ] && kind=src
    [ -f "$1/dev/newstest2013.$lang" ] || [ -f "$1/dev/newstest2013-$kind.$lang.sgm" ] \
      || die "missing $1/dev/newstest2013.$lang (or $1/dev/newstest2013-$kind.$lang.sgm)"
  done
  for kind in "src.$SRC" "ref.$TGT"; do
    [ -f "$1/test-full/newstest2014-$PAIR-$kind.sgm" ] \
      || die "missing $1/test-full/newstest2014-$PAIR-$kind.sgm"
  done
}

prepare_usage() {
  cat <<EOF
Usage: $(basename "$0") [--local DIR] [--workdir DIR] [--vocab-size N] [--workers N]
Downloads WMT14 $SRC-$TGT (or reads --local DIR: the unpacked archives, same layout), normalises
it into WORKDIR/raw/{train,valid,test}.{$SRC,$TGT} (valid: newstest2013, test: newstest2014) and
runs vtx preprocess (joint vocabulary, $VOCAB_SIZE) into WORKDIR/data-bin.
Default WORKDIR: $WORK
EOF
}

prepare_main() {
  local orig="" workers
  workers=$(nproc 2> /dev/null || echo 1)
  while [ $# -gt 0 ]; do
    case $1 in
      --local) need_value "$1" $# "${2-}"; orig=$2; [ -d "$orig" ] || die "--local '$orig' is not a directory"; shift 2 ;;
      --workdir) need_value "$1" $# "${2-}"; WORK=$2; shift 2 ;;
      --vocab-size) need_value "$1" $# "${2-}"; is_count "$2" || die "--vocab-size must be a positive whole number, got '$2'"; VOCAB_SIZE=$2; shift 2 ;;
      --workers) need_value "$1" $# "${2-}"; is_count "$2" || die "--workers must be a positive whole number, got '$2'"; workers=$2; shift 2 ;;
      -h|--help) prepare_usage; exit 0 ;;
      *) die "unknown argument '$1' (see --help)" ;;
    esac
  done
  check_vtx
  [ -z "$orig" ] || check_inputs "$orig"
  mkdir -p "$WORK"
  if [ -z "$orig" ]; then
    orig=$WORK/orig
    mkdir -p "$orig"
    download_archives "$WORK"
    check_inputs "$orig"
  fi
  local raw=$WORK/raw tmp=$WORK/raw.tmp
  rm -rf "$tmp" && mkdir -p "$tmp"
  trap "rm -rf -- $(printf %q "$tmp")" EXIT  # a failure leaves no part of the text
  for corpus in "${CORPORA[@]}"; do append_corpus "$orig" "$corpus" "$tmp"; done
  write_valid "$orig" "$tmp"
  write_test "$orig" "$tmp"
  rm -rf "$raw" && mv "$tmp" "$raw"  # complete text only under the final name
  trap - EXIT
  step "vtx preprocess -> $WORK/data-bin (vocabulary $VOCAB_SIZE)"
  "$VTX" preprocess -s "$SRC" -t "$TGT" --trainpref "$raw/train" --validpref "$raw/valid" \
    --testpref "$raw/test" --destdir "$WORK/data-bin" --vocab-size "$VOCAB_SIZE" \
    --workers "$workers" --force
}

# ---- train ----

train_usage() {
  cat <<EOF
Usage: $(basename "$0") [--gpus N] [--max-tokens N] [--max-steps N] [--arch A] [--workdir DIR]
                 [--save-dir DIR] [-- more vtx train flags]
Trains Transformer $ARCH ($STEPS steps, P_drop $DROPOUT) on WORKDIR/data-bin with about
$TOKENS_PER_STEP source + $TOKENS_PER_STEP target tokens per step: --update-freq is
ceil($TOKENS_PER_STEP / (max-tokens x GPUs x workers)), workers being TF_CONFIG's hosts (1
without it). Numbered checkpoints every $SAVE_STEPS updates (the paper's 10 minutes at its step
times; a new best validation between them is checkpoint_best only), the last $NUM_LAST kept and
averaged into SAVE_DIR/average.npz. Default --gpus: CUDA_VISIBLE_DEVICES's count when
set, else the GPUs nvidia-smi lists (8 in the paper); give --gpus when vtx train's --devices
picks fewer.
EOF
}

count_gpus() {  # the GPUs TensorFlow will see: CUDA_VISIBLE_DEVICES when set, else nvidia-smi's
  if [ -n "${CUDA_VISIBLE_DEVICES+set}" ]; then
    # "0,1" -> 2; "" or "-1" -> 0 (TensorFlow then sees none; entries after an invalid one are
    # ignored by CUDA, not counted here)
    echo "$CUDA_VISIBLE_DEVICES" | tr ',' '\n' | awk '$0 == "-1" { exit } /[^ ]/ { n++ } END { print n + 0 }'
  elif command -v nvidia-smi > /dev/null; then nvidia-smi -L | grep -c '^GPU' || true; else echo 0; fi
}

count_workers() {  # the hosts of a multi-worker run: TF_CONFIG's chief and workers, else 1
  [ -n "${TF_CONFIG:-}" ] || { echo 1; return; }
  "$PYTHON" -c '
import json, os, sys
try:
    cluster = json.loads(os.environ["TF_CONFIG"])["cluster"]
    print(max(1, len(cluster.get("worker", [])) + len(cluster.get("chief", []))))
except (ValueError, KeyError, TypeError) as error:
    sys.exit(f"TF_CONFIG is not a JSON object with a cluster ({error})")
' || die "cannot read TF_CONFIG"
}

train_main() {  # uses ARCH STEPS DROPOUT NUM_LAST SAVE_STEPS set by the recipe
  local gpus max_tokens=3200 save_dir="" extra=()
  gpus=$(count_gpus)
  while [ $# -gt 0 ]; do
    case $1 in
      --gpus) need_value "$1" $# "${2-}"; is_count "$2" || die "--gpus must be a positive whole number, got '$2'"; gpus=$2; shift 2 ;;
      --max-tokens) need_value "$1" $# "${2-}"; is_count "$2" || die "--max-tokens must be a positive whole number, got '$2'"; max_tokens=$2; shift 2 ;;
      --max-steps) need_value "$1" $# "${2-}"; is_count "$2" || die "--max-steps must be a positive whole number, got '$2'"; STEPS=$2; shift 2 ;;
      --arch) need_value "$1" $# "${2-}"; ARCH=$2; shift 2 ;;
      --workdir) need_value "$1" $# "${2-}"; WORK=$2; shift 2 ;;
      --save-dir) need_value "$1" $# "${2-}"; save_dir=$2; shift 2 ;;
      -h|--help) train_usage; exit 0 ;;
      --) shift; extra=("$@"); break ;;
      *) die "unknown argument '$1' (see --help; vtx train flags go after --)" ;;
    esac
  done
  check_vtx
  [ -f "$WORK/data-bin/meta.json" ] || die "no $WORK/data-bin/meta.json: run prepare.sh first"
  save_dir=${save_dir:-$WORK/checkpoints-$ARCH}
  local workers
  workers=$(count_workers)
  # One update spans every replica of every worker (TF_CONFIG): the step's tokens are theirs.
  local replicas=$(( (gpus > 0 ? gpus : 1) * workers ))
  local update_freq=$(( (TOKENS_PER_STEP + max_tokens * replicas - 1) / (max_tokens * replicas) ))
  step "vtx train --arch $ARCH: $replicas replica(s) ($workers worker(s)) x $max_tokens tokens x update-freq $update_freq"
  # Numbered checkpoints every SAVE_STEPS updates, the paper's 10 minutes at its step times
  # (base 0.4 s: 1,500; big 1.0 s: 600), so the last NUM_LAST averaged span what the paper's
  # did whatever the GPUs (docs/differences.md); a new best between them is checkpoint_best
  # only. --keep-last: a checkpoint holds the weights and Adam's two moments (base ~0.76 GB,
  # big ~2.6 GB); the last NUM_LAST are the ones averaged.
  "$VTX" train "$WORK/data-bin" --arch "$ARCH" --save-dir "$save_dir" --dropout "$DROPOUT" \
    --max-tokens "$max_tokens" --update-freq "$update_freq" --max-steps "$STEPS" \
    --save-interval-minutes 0 --save-interval-steps "$SAVE_STEPS" --keep-last "$NUM_LAST" \
    ${extra[@]+"${extra[@]}"}
  average_last "$save_dir" "$NUM_LAST"
}

average_last() {  # save_dir n
  local count
  count=$(find "$1" -maxdepth 1 -name 'checkpoint_[0-9]*.npz' | wc -l)
  [ "$count" -gt 0 ] || die "no checkpoint in $1"
  if [ "$count" -lt "$2" ]; then
    echo "warning: only $count checkpoints in $1, averaging those instead of $2" >&2
  fi
  "$VTX" average-checkpoints --inputs "$1" --num-last $(( count < $2 ? count : $2 )) \
    --output "$1/average.npz" --force
}

# ---- evaluate ----

evaluate_usage() {
  cat <<EOF
Usage: $(basename "$0") CHECKPOINT [--workdir DIR] [-- more vtx translate flags]
Translates newstest2014 ($SRC->$TGT, beam 4, alpha 0.6) and prints two BLEU scores:
detokenized sacreBLEU (with its signature) and the paper's tokenized BLEU (Moses tokenizer via
sacremoses, for German compounds split at hyphens as ##AT##-##AT## as tensor2tensor's
get_ende_bleu.sh does, then sacreBLEU -tok none).
EOF
}

# Moses tokenization, and for German the paper's hyphen splitting, stdin to stdout.
tokenize_for_paper_bleu() {
  "$PYTHON" -c '
import sys
from sacremoses import MosesTokenizer
tokenizer = MosesTokenizer(lang=sys.argv[1])
for line in sys.stdin:
    print(tokenizer.tokenize(line.rstrip("\n"), return_str=True))
' "$TGT" | if [ "$TGT" = de ]; then perl -ple 's{(\S)-(\S)}{$1 ##AT##-##AT## $2}g'; else cat; fi
}

evaluate_main() {
  local checkpoint="" extra=()
  while [ $# -gt 0 ]; do
    case $1 in
      --workdir) need_value "$1" $# "${2-}"; WORK=$2; shift 2 ;;
      -h|--help) evaluate_usage; exit 0 ;;
      --) shift; extra=("$@"); break ;;
      -*) die "unknown argument '$1' (see --help)" ;;
      *) [ -z "$checkpoint" ] || die "one CHECKPOINT only, got '$checkpoint' and '$1'"; checkpoint=$1; shift ;;
    esac
  done
  [ -n "$checkpoint" ] || die "give the CHECKPOINT to evaluate (see --help)"
  [ -e "$checkpoint" ] || die "no checkpoint '$checkpoint'"
  check_vtx
  local raw=$WORK/raw out=$WORK/eval
  [ -f "$raw/test.$SRC" ] || die "no $raw/test.$SRC: run prepare.sh first"
  "$PYTHON" -c 'import sacremoses' 2> /dev/null \
    || die "the tokenized BLEU needs sacremoses: $PYTHON -m pip install sacremoses"
  mkdir -p "$out"
  step "vtx translate newstest2014 ($(wc -l < "$raw/test.$SRC") sentences)"
  "$VTX" translate --checkpoint "$checkpoint" --input "$raw/test.$SRC" \
    --output "$out/newstest2014.hyp.$TGT" --force --reference "$raw/test.$TGT" \
    ${extra[@]+"${extra[@]}"} 2> "$out/translate.log" \
    || { cat "$out/translate.log" >&2; die "vtx translate failed"; }
  echo "sacreBLEU (detokenized), newstest2014 $SRC-$TGT:"
  grep -E '^(BLEU|nrefs)' "$out/translate.log"
  tokenize_for_paper_bleu < "$out/newstest2014.hyp.$TGT" > "$out/hyp.tok"
  tokenize_for_paper_bleu < "$raw/test.$TGT" > "$out/ref.tok"
  if [ "$TGT" = de ]; then local how="with compound splitting (the paper's)"; else local how="(multi-bleu.perl's)"; fi
  echo "tokenized BLEU $how, newstest2014 $SRC-$TGT:"
  "$(dirname "$VTX")/sacrebleu" "$out/ref.tok" -i "$out/hyp.tok" -tok none -m bleu -f text
}
