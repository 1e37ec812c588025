#!/usr/bin/env bash
# The seeds' concurrency table measured on the lent H200 (../shared/gpu: vLLM 0.20.2, Qwen2.5-14B's
# exact shape with random weights, TP=1), once per workload profile, through the project's CLI:
#   source /tmp/w/env.sh && bash benchmarks/gpu_sweep.sh [PROFILES] [LEVELS]     carry: [".gpu/bin"]
# PROFILES default "chat batch", LEVELS "1,4,8,16,32"; ~200 tokens in, 500 out (bench --sweep's defaults).
# Per profile: plan --json, serve --profile P --detach --wait, bench --sweep --json, stop --json.
# Everything lands in $OUT/gpu_sweep.tar.gz (packed again after every step), steps in $OUT/steps.tsv.
set -uo pipefail
OUT=${OUT:-/tmp/out} WAIT=${WAIT:-400}
PROFILES=${1:-chat batch} LEVELS=${2:-1,4,8,16,32}
R=/tmp/res/gpu_sweep
rm -rf "$R" && mkdir -p "$R" "$OUT"
qt() { python3 -m tui.entry "$@"; }

step() {  # step NAME CMD...: stdout to $R/NAME.json (stderr to NAME.err), a line to steps.tsv
  local name=$1 t=$SECONDS rc=0; shift
  "$@" > "$R/$name.json" 2> "$R/$name.err" || rc=$?
  printf '%s\t%s\t%s\n' "$name" "$rc" "$((SECONDS - t))" >> "$R/steps.tsv" && cp "$R/steps.tsv" "$OUT/"
  echo "== $name: rc $rc, $((SECONDS - t)) s"
  tar czf "$OUT/gpu_sweep.tar.gz" -C /tmp/res gpu_sweep
  return $rc
}

nvidia-smi --query-gpu=name,memory.used,memory.total,driver_version --format=csv > "$R/smi.txt" 2>&1
step profiles qt profiles --json
for p in $PROFILES; do
  step "plan-$p" qt --profile "$p" plan --json
  if step "serve-$p" qt --profile "$p" serve --detach --wait "$WAIT" --json; then
    step "sweep-$p" qt --profile "$p" bench --sweep "$LEVELS" --json
  fi
  step "stop-$p" qt stop --json
done
cp -r /tmp/qthome/state/logs "$R/logs" 2>/dev/null; cp -r /tmp/qthome/data/sweeps "$R/sweeps" 2>/dev/null
tar czf "$OUT/gpu_sweep.tar.gz" -C /tmp/res gpu_sweep
