#!/usr/bin/env bash
# The one-key fix on the lent H200 (../shared/gpu: vLLM 0.20.2, the 14B shape, TP=1), headless:
#   source /tmp/w/env.sh && bash benchmarks/gpu_fix.sh          carry: [".gpu/bin"]      (about 4 minutes)
# 1. h200.toml copied with gpu_memory_utilization = 0.17 (the no_cache_memory failure of
#    tests/fixtures/vllm-logs/v0.20.2-h200-...-util0.17-no-cache-memory-fail.log): serve --detach --wait fails;
# 2. status --json: the fix as data with the ledger's verdict;
# 3. fix --yes --wait: saved into that copy, started again, READY (or the new failure);
# 4. stacks --json while it starts (py-spy if the image has it, else each thread's kernel state); stop.
# Everything lands in $OUT/gpu_fix.tar.gz, steps in $OUT/steps.tsv.
set -uo pipefail
OUT=${OUT:-/tmp/out} WAIT=${WAIT:-500}
R=/tmp/res/gpu_fix
rm -rf "$R" && mkdir -p "$R" "$OUT"
CFG=$R/h200-fix.toml
sed 's/^gpu_memory_utilization = .*/gpu_memory_utilization = 0.17  # too little: the fix raises it/' \
  "${QWEN_TUI_CONFIG:-/tmp/w/h200.toml}" > "$CFG"
qt() { python3 -m tui.entry --config "$CFG" "$@"; }

step() {  # step NAME CMD...: stdout to $R/NAME.json (stderr to NAME.err), a line to steps.tsv
  local name=$1 t=$SECONDS rc=0; shift
  "$@" > "$R/$name.json" 2> "$R/$name.err" || rc=$?
  printf '%s\t%s\t%s\n' "$name" "$rc" "$((SECONDS - t))" >> "$R/steps.tsv" && cp "$R/steps.tsv" "$OUT/"
  echo "== $name: rc $rc, $((SECONDS - t)) s"; head -c 800 "$R/$name.json"; echo
  tar czf "$OUT/gpu_fix.tar.gz" -C /tmp/res gpu_fix
  return $rc
}

step serve-util0.17 qt serve --detach --wait "$WAIT" --json
step status-failed qt status --json
( for _ in $(seq 60); do sleep 5; st=$(qt status --json 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["state"])' 2>/dev/null)
    if [ "$st" = starting ]; then qt stacks --json > "$R/stacks-while-starting.json" 2>&1; break; fi; done ) &
step fix-yes qt fix --yes --wait "$WAIT" --json
wait
step status-after qt status --json
cp "$CFG" "$R/h200-fix.after.toml"
step stop qt stop --json
cp -r /tmp/qthome/state/logs "$R/logs" 2>/dev/null
tar czf "$OUT/gpu_fix.tar.gz" -C /tmp/res gpu_fix
