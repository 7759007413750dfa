#!/usr/bin/env bash
# Install the runtime and start the dashboard (with its live demo collector) on 127.0.0.1.
#   bash scripts/dashboard.sh [--server.port 8501] [other streamlit flags]
# To expose it beyond this machine, pass --server.address 0.0.0.0 explicitly (see README).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
$PY -m pip install -q --disable-pip-version-check -r requirements.txt
$PY -m pip install -q --disable-pip-version-check --no-deps -e .
exec $PY -m streamlit run app.py --server.address 127.0.0.1 "$@"
