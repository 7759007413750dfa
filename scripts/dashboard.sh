#!/usr/bin/env bash
# Install the runtime and start the dashboard (with its live demo collector) on 127.0.0.1.
#   bash scripts/dashboard.sh [--server.port 8501] [other streamlit flags]
# To expose it beyond this machine, pass --server.address 0.0.0.0 explicitly (see README).
# pip runs only when requirements.txt or pyproject.toml changed since the last install with
# this Python (a stamp under ${XDG_CACHE_HOME:-~/.cache}/kvviz), or a package is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
stamp_dir=${XDG_CACHE_HOME:-$HOME/.cache}/kvviz
want=$(cat requirements.txt pyproject.toml | sha256sum | cut -c1-16)-$($PY -c 'import sys; print(sys.prefix.replace("/", "_"))')
stamp=$stamp_dir/dashboard-deps-$want
have_all() {
  $PY - <<'EOF' 2>/dev/null
import importlib.util as u, sys
mods = ("streamlit", "plotly", "pandas", "pyarrow", "torch", "zmq", "msgspec", "psutil", "pynvml",
        "prometheus_client", "kvviz")
sys.exit(0 if all(u.find_spec(m) for m in mods) else 1)
EOF
}
if [ ! -f "$stamp" ] || ! have_all; then
  $PY -m pip install -q --disable-pip-version-check -r requirements.txt
  $PY -m pip install -q --disable-pip-version-check --no-deps -e .
  $PY -m kvviz warm  # numba's JIT once here (about 1-2 min), not while a user waits
  mkdir -p "$stamp_dir" && touch "$stamp"
fi
exec $PY -m streamlit run app.py --server.address 127.0.0.1 "$@"
