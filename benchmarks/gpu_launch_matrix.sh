#!/usr/bin/env bash
# Raw launches on the lent H200 for the ledger (issue 27): for each NAME=SETS pair, the plan of the code that runs,
# a launch with VLLM_LOGGING_LEVEL=DEBUG (vLLM 0.20.2 prints its memory breakdown at DEBUG), status and stop.
#   source /tmp/w/env.sh && bash benchmarks/gpu_launch_matrix.sh TAG 'u022=server.gpu_memory_utilization=0.22' ...
# SETS is a comma-separated list of --set values ('' = the config as it is). The first launch on a fresh machine is a
# cold compile; repeating a NAME's sets under a new NAME gives the warm start. Into $OUT/TAG.tar.gz (re-packed after
# every step, so a call cut at its limit still brings back what ran) and $OUT/TAG-steps.tsv.
set -uo pipefail
TAG=${1:?tag}; shift
OUT=${OUT:-/tmp/out} WAIT=${WAIT:-400}
R=/tmp/res/$TAG
rm -rf "$R" && mkdir -p "$R" "$OUT"
qt() { python3 -m tui.entry "$@"; }
pack() { tar czf "$OUT/$TAG.tar.gz" -C /tmp/res "$TAG"; cp "$R/steps.tsv" "$OUT/$TAG-steps.tsv" 2>/dev/null; }
step() {  # step NAME CMD...: stdout to $R/NAME.json, stderr to NAME.err, a line to steps.tsv
  local name=$1 t=$SECONDS rc=0; shift
  "$@" > "$R/$name.json" 2> "$R/$name.err" || rc=$?
  printf '%s\t%s\t%s\n' "$name" "$rc" "$((SECONDS - t))" >> "$R/steps.tsv"
  echo "== $name: rc $rc, $((SECONDS - t)) s"
  pack
  return $rc
}
nvidia-smi --query-gpu=name,memory.used,memory.total,driver_version --format=csv > "$R/smi-start.txt" 2>&1
for pair in "$@"; do
  name=${pair%%=*} sets=${pair#*=}
  args=(--set 'server.env.VLLM_LOGGING_LEVEL=DEBUG')
  IFS=, read -ra kv <<< "$sets"
  for s in "${kv[@]}"; do [ -n "$s" ] && args+=(--set "$s"); done
  step "plan-$name" qt "${args[@]}" plan --json
  nvidia-smi --query-gpu=memory.used,memory.total --format=csv,noheader > "$R/smi-before-$name.txt" 2>&1
  ls ~/.cache/vllm/torch_compile_cache 2>/dev/null | wc -l > "$R/compile-cache-dirs-before-$name.txt"
  step "serve-$name" qt "${args[@]}" serve --detach --wait "$WAIT" --json
  step "status-$name" qt "${args[@]}" status --json
  step "stop-$name" qt stop --json
  mkdir -p "$R/logs-$name"
  # the launch's own log (the newest vllm-*.log), then empty the log dir so each launch keeps one
  for f in /tmp/qthome/state/logs/vllm-*.log; do [ -f "$f" ] && mv "$f" "$R/logs-$name/"; done
  cp /tmp/qthome/state/logs/supervisor.log "$R/logs-$name/" 2>/dev/null
  pack
done
nvidia-smi --query-gpu=memory.used,memory.total --format=csv > "$R/smi-end.txt" 2>&1
pack
