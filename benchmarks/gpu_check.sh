#!/usr/bin/env bash
# GPU check for kvviz.kv, one script, < 5 minutes on a fresh CUDA machine (written for an H200:
# Python 3.12, torch 2.11, Triton 3.6, nvidia-ml-py; no network, no streamlit/plotly).
#
#   OUT=/some/dir bash benchmarks/gpu_check.sh        (run from the repository root)
#
# Stages, in priority order, each under its own timeout; later ones are skipped when the
# time budget runs short. Everything lands in $OUT; $OUT/summary.txt is the short version.
#   1 correctness: Triton kernels on CUDA vs SDPA (pytest tests/kv, or the case runner)
#   2 attention at the H200 target: batch 64, context 4096, 32 q / 8 kv heads, d 128, bf16
#   3 real mode for 60 s (kvviz collect --mode real, else
#     benchmarks/bench_attention.py real-mode with the llama-3-8b shape)
#   4 block-size sweep 1..256 at the target shape
#   5 contiguous baseline per SDPA backend; 6 Triton launch-config sweep
# An NVML sampler runs throughout ($OUT/nvml.csv); the summary gives peak memory per stage.
set -u
OUT=${OUT:-$(mktemp -d /tmp/kvviz_gpu_check.XXXX)}
mkdir -p "$OUT"
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
BUDGET=${BUDGET:-285}
T0=$(date +%s)
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
say() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a "$OUT/summary.txt"; }
stage() {  # stage NAME TIMEOUT CMD...  (output to $OUT/NAME.log, phase times to phases.csv)
  local name=$1 limit=$2; shift 2
  local l; l=$(left)
  if (( l < 15 )); then say "SKIP $name (budget spent)"; return 0; fi
  (( limit > l )) && limit=$l
  echo "$name,start,$(date +%s.%N)" >> "$OUT/phases.csv"
  timeout --kill-after=5 "$limit" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  echo "$name,end,$(date +%s.%N)" >> "$OUT/phases.csv"
  say "$name rc=$rc ($( [ $rc = 124 ] && echo "timed out after ${limit}s" || echo done))"
  return $rc
}

say "kvviz gpu_check -> $OUT"
{ nvidia-smi; python -c "import sys, torch; print(sys.version); print('torch', torch.__version__, \
'cuda', torch.version.cuda, torch.cuda.get_device_name(0))"; \
  python -c "import triton; print('triton', triton.__version__)"; } > "$OUT/env.txt" 2>&1
grep -E "^(torch|triton) " "$OUT/env.txt" | tee -a "$OUT/summary.txt"

python - "$OUT/nvml.csv" <<'PY' &
import sys, time
try:
    import pynvml
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
except Exception as exc:
    open(sys.argv[1], "w").write(f"# no NVML: {exc!r}\n")
    sys.exit(0)
with open(sys.argv[1], "w", buffering=1) as f:
    f.write("t,used_bytes,total_bytes,gpu_util\n")
    end = time.time() + 330
    while time.time() < end:
        m = pynvml.nvmlDeviceGetMemoryInfo(h)
        u = pynvml.nvmlDeviceGetUtilizationRates(h).gpu
        f.write(f"{time.time():.2f},{m.used},{m.total},{u}\n")
        time.sleep(0.5)
PY
SAMPLER=$!

# 1 correctness ------------------------------------------------------------------------------
if python -c "import pytest" 2>/dev/null; then
  stage tests 150 python -m pytest tests/kv -q -x -p no:cacheprovider -rs
else
  stage tests 150 bash -c 'cd tests/kv && python -c "
import json, sys
from triton_cases import CASES, CUDA_CASES, run
res = run([*CASES, *CUDA_CASES], \"cuda\")
[print(json.dumps(r)) for r in res]
sys.exit(0 if all(r[\"ok\"] for r in res) else 1)"'
fi
tail -n 3 "$OUT/tests.log" | tee -a "$OUT/summary.txt"

# 2 attention at the target shape ------------------------------------------------------------
stage attention 60 python -m kvviz bench attention --device cuda --batch 64 --context 4096 \
  --heads 32 --kv-heads 8 --head-dim 128 --block-size 16 --dtype bfloat16 --repeats 50 --json
grep '^{' "$OUT/attention.log" | python -c "
import json, sys
for line in sys.stdin:
    r = json.loads(line)
    print(f\"target: paged {r['paged_ms']} ms ({r['backend']}) contiguous {r['contiguous_ms']} ms \
({r['contiguous_backend']}) ratio {r['ratio']} -> {r['gbps']} GB/s, max diff {r['max_abs_diff']}\")
" | tee -a "$OUT/summary.txt"

# 3 real mode, 60 s --------------------------------------------------------------------------
REAL_DONE=0
if python -m kvviz collect --help > "$OUT/collect_help.txt" 2>&1 \
   && grep -q -- "--mode" "$OUT/collect_help.txt"; then
  EXTRA=()  # pass only the options this build's collector has
  has() { grep -q -- "$1" "$OUT/collect_help.txt"; }
  has "--device" && EXTRA+=(--device cuda)
  has "--out" && EXTRA+=(--out "$OUT/real_run.db" --overwrite)
  has "--steps-per-s" && EXTRA+=(--steps-per-s 0)  # unpaced: measure the step rate
  has "--rate" && EXTRA+=(--rate inf --requests 4000)
  has "--loop" && EXTRA+=(--loop)
  has "--capacity-tokens" && EXTRA+=(--capacity-tokens 131072)  # x 128 KiB/token per lane
  has "--max-num-seqs" && EXTRA+=(--max-num-seqs 256)
  stage real_collect 100 python -m kvviz collect --mode real --duration 60 "${EXTRA[@]}" \
    && REAL_DONE=1
fi
if [ $REAL_DONE = 0 ]; then
  # llama-3-8b shape: 32 layers, 8 kv heads, bf16; 64 sequences up to 2048 tokens (~17 GB pool)
  stage real_bench 100 python benchmarks/bench_attention.py real-mode --json --device cuda \
    --duration 60 --seqs 64 --context 1024 --model llama-3-8b
fi
grep -h -E '"steps_per_s"|steps/s' "$OUT"/real_*.log 2>/dev/null | tail -n 3 \
  | tee -a "$OUT/summary.txt"

# 4-6 sweeps -----------------------------------------------------------------------------------
stage sweep 90 python -m kvviz bench attention --device cuda --batch 64 --context 4096 \
  --heads 32 --kv-heads 8 --head-dim 128 --dtype bfloat16 --sweep-block-sizes --json
grep '^{' "$OUT/sweep.log" | python -c "
import json, sys
for line in sys.stdin:
    r = json.loads(line)
    print(f\"block {r['block_size']:>4}: paged {r['paged_ms']} ms ratio {r['ratio']} {r['gbps']} GB/s\")
" | tee -a "$OUT/summary.txt"
stage sdpa_backends 40 python benchmarks/bench_attention.py sdpa-backends --json
stage triton_configs 120 python benchmarks/bench_attention.py triton-configs --json

kill "$SAMPLER" 2>/dev/null
python - "$OUT" <<'PY' | tee -a "$OUT/summary.txt"
import csv, sys, os
out = sys.argv[1]
try:
    rows = [r for r in csv.DictReader(open(os.path.join(out, "nvml.csv")))]
except Exception as exc:
    print(f"nvml: no samples ({exc!r})"); sys.exit(0)
phases = {}
for name, kind, t in csv.reader(open(os.path.join(out, "phases.csv"))):
    phases.setdefault(name, {})[kind] = float(t)
for name, p in phases.items():
    seen = [int(r["used_bytes"]) for r in rows
            if p.get("start", 0) <= float(r["t"]) <= p.get("end", 1e18)]
    if seen:
        print(f"nvml {name}: peak used {max(seen) / 2**30:.2f} GiB over {len(seen)} samples")
PY
say "done; files in $OUT"
