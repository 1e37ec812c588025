#!/usr/bin/env bash
# bench_vs_vllm on the lent GPU box (../shared/gpu), from the project root after install.sh:
#   source /tmp/w/env.sh && [PROMPTS=same|random] bash benchmarks/gpu_vs_vllm.sh "$OUT" [ROUNDS]
# serve --detach --wait (READY), benchmarks/bench_vs_vllm.py --no-start against it (a warm-up round
# of both tools, then ROUNDS counted rounds, default 5), stop. Into OUT: serve.json, vs.txt (each
# round as it ends: a call cut at its limit still brings back what ran), vs_vllm.json, stop.json and
# the server log. Exit 1 when a step failed.
set -uo pipefail
OUT=${1:?OUT dir} ROUNDS=${2:-5}
mkdir -p "$OUT"
rc=0
python3 -m tui.entry serve --detach --wait 300 --json > "$OUT/serve.json" 2>&1 || rc=1
if [ $rc = 0 ]; then
  python3 benchmarks/bench_vs_vllm.py --base-url http://127.0.0.1:8000 --model qwen2.5-14b --no-start \
    --rounds "$ROUNDS" --warmup-rounds 1 ${PROMPTS:+--prompts $PROMPTS} --tokenizer /tmp/w/model/Qwen2.5-14B-Instruct --json \
    --out "$OUT/vs_vllm.json" > /dev/null 2> "$OUT/vs.txt" || rc=1
fi
python3 -m tui.entry stop --json > "$OUT/stop.json" 2>&1 || rc=1
cp /tmp/qthome/state/logs/vllm-*.log "$OUT/" 2>/dev/null
exit $rc
