#!/usr/bin/env bash
# Sets up an isolated environment (.venv) with vtx and its test dependencies, then runs the suite.
# Usage: bash tests/run.sh [pytest args...]
set -euo pipefail
cd "$(dirname "$0")/.."
# The machine first: a figure or a failure means little without it (bf16 support varies by CPU).
cpu=$(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1)
bf16=$(grep -qw avx512_bf16 /proc/cpuinfo 2>/dev/null && echo "with avx512_bf16" || echo "without avx512_bf16")
bf16="$bf16, $(grep -qw amx_bf16 /proc/cpuinfo 2>/dev/null && echo "with AMX" || echo "without AMX")"
# The model name alone may be generic ("Intel(R) Xeon(R) Processor" in a VM): family and model too.
ident=$(awk -F': *' '/^cpu family/ && !f { f = $2 } /^model[[:space:]]*:/ && !m { m = $2 }
                     END { if (f != "") printf "family %s model %s, ", f, m }' /proc/cpuinfo 2>/dev/null || true)
echo "vtx tests on: ${cpu:-unknown CPU} (${ident}$(nproc) cores, $bf16)"
# System packages of the tests, installed here once where we may (as root with apt-get), not by
# the tests: Debian's chromium and chromium-driver for the page test (tests/serve/test_page.py),
# slurm-wlm and munge for a one-node Slurm cluster (tests/training/test_slurm.py), redis-server
# for limits shared between servers (tests/serve/test_limit_store.py).
missing=""
command -v chromium >/dev/null && command -v chromedriver >/dev/null || missing="chromium chromium-driver"
command -v srun >/dev/null && command -v munged >/dev/null || missing="$missing slurm-wlm munge"
command -v redis-server >/dev/null || missing="$missing redis-server"
if [ -n "$missing" ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  # Not fatal: without them the tests that need them fail or skip, saying what is missing.
  # shellcheck disable=SC2086
  { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
      --no-install-recommends $missing; } || echo "tests/run.sh: could not install $missing"
fi
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e ".[test]"
# Two test processes (pytest-xdist): most of a test's time is single-threaded Python (tracing,
# subprocesses starting TensorFlow), so on two cores two processes finish well before one.
# `bash tests/run.sh -n 0` runs it in one process; -n N in N (the last -n given wins).
# --durations: the slowest tests, for whoever keeps the suite within its time.
exec .venv/bin/python -m pytest -q -ra -p no:cacheprovider -n 2 --durations=30 "$@"
