#!/usr/bin/env bash
# The ledger's learning loop on the lent H200 (issue 27): plan -> launch -> change -> plan -> launch, the state dir
# kept between launches so that each plan learns from the launches before it (backend/ledger/learned.py).
# VLLM_LOGGING_LEVEL=DEBUG: vLLM 0.20.2 prints its memory breakdown at DEBUG.
#   source /tmp/w/env.sh && bash benchmarks/gpu_ledger_learn.sh TAG [NAME=SETS ...]
# SETS: comma-separated --set values ('' = the config as it is). A launch takes ~80 s warm, ~110 s when the change
# makes vLLM compile again (max_model_len, max_num_seqs, KV dtype do; the utilization does not), so one 10-minute
# call holds about four. Run the two halves back to back on the same machine (the state dir in /tmp survives while
# the machine stays warm):
#   bash benchmarks/gpu_ledger_learn.sh learn1 base= u050=server.gpu_memory_utilization=0.5 \
#        len16k=server.max_model_len=16384
#   bash benchmarks/gpu_ledger_learn.sh learn2 seqs32=server.max_num_seqs=32 fp8kv=server.kv_cache_dtype=fp8 \
#        eager=server.enforce_eager=true
# (with no NAME=SETS the first half runs). Out: $OUT/TAG.tar.gz (plans, logs, the measurement store) and
# $OUT/TAG-loop.tsv: name, planned KV tokens, the plan's basis, vLLM's KV tokens, error %, compile cache planned.
set -uo pipefail
TAG=${1:?tag}; shift
[ $# -gt 0 ] || set -- base= u050=server.gpu_memory_utilization=0.5 len16k=server.max_model_len=16384
OUT=${OUT:-/tmp/out} WAIT=${WAIT:-300}
R=/tmp/res/$TAG
rm -rf "$R" && mkdir -p "$R" "$OUT"
qt() { python3 -m tui.entry "$@"; }
STATE=$(python3 -c 'from backend import paths; print(paths.state_dir())')
pack() {
  cp "$STATE/ledger-measurements.json" "$R/" 2>/dev/null
  tar czf "$OUT/$TAG.tar.gz" -C /tmp/res "$TAG"; cp "$R/loop.tsv" "$OUT/$TAG-loop.tsv" 2>/dev/null
}
printf 'name\tplanned_tokens\tbasis\tvllm_tokens\terror_pct\tcompile_cache_planned\n' > "$R/loop.tsv"
for pair in "$@"; do
  name=${pair%%=*} sets=${pair#*=}
  args=(--set 'server.env.VLLM_LOGGING_LEVEL=DEBUG')
  IFS=, read -ra kv <<< "$sets"
  for s in "${kv[@]}"; do [ -n "$s" ] && args+=(--set "$s"); done
  t=$SECONDS
  qt "${args[@]}" plan --json > "$R/plan-$name.json" 2> "$R/plan-$name.err"
  before=$(ls "$STATE"/logs/vllm-*.log 2>/dev/null | wc -l)
  qt "${args[@]}" serve --detach --wait "$WAIT" --json > "$R/serve-$name.json" 2> "$R/serve-$name.err"
  qt "${args[@]}" status --json > "$R/status-$name.json" 2>&1
  qt stop --json > "$R/stop-$name.json" 2>&1
  # the logs stay in the state dir (the next plan learns from them); a copy of this launch's goes with the results
  newest=$(ls -t "$STATE"/logs/vllm-*.log 2>/dev/null | head -1)
  [ -n "$newest" ] && [ "$(ls "$STATE"/logs/vllm-*.log | wc -l)" -gt "$before" ] && cp "$newest" "$R/vllm-$name.log"
  python3 - "$R/plan-$name.json" "$R/vllm-$name.log" "$name" >> "$R/loop.tsv" <<'EOF'
import json, sys
from backend.logparse import LogParser
plan_path, log_path, name = sys.argv[1:4]
try:
    plan = json.load(open(plan_path))
except (OSError, ValueError):
    plan = {}
p = LogParser()
try:
    for line in open(log_path, errors="replace"):
        p.feed(line.rstrip("\n"))
except OSError:
    pass
want, got = p.figures.get("kv_cache_tokens"), plan.get("kv_cache_tokens")
err = f"{100 * (got - want) / want:+.2f}" if want and got is not None else ""
b = plan.get("basis") or {}
print("\t".join(str(x) for x in (name, got, b.get("summary", ""), want, err, b.get("compile_cache", ""))))
EOF
  echo "== $name: $((SECONDS - t)) s"; tail -1 "$R/loop.tsv"
  pack
done
pack
