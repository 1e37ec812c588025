#!/usr/bin/env bash
# Issue 31 on the lent H200 (../shared/gpu: vLLM 0.20.2, Qwen2.5-14B's shape, random weights, TP=1), in one go:
#   source /tmp/w/env.sh && bash benchmarks/gpu_energy_sleep.sh [LEVELS] [IDLE_S]     carry: [".gpu/bin"]
# LEVELS default "1,4,8,16", IDLE_S (server.sleep_after_idle_s) default 30.
# 1. serve with sleep mode on, the idle timer at IDLE_S, the flight recorder every 2 s;
# 2. bench --sweep LEVELS with energy (J per output token, tok/s per W from NVML power) and one bench;
# 3. host --json (the level-1 sleep fit), then nothing: the supervisor must put it to sleep by itself
#    after IDLE_S (status shows SLEEPING, nvidia-smi the memory freed);
# 4. a chat while asleep (its answer and time) and the supervisor's wake on request; then sleep and wake by
#    hand (timed), one bench request after it, history --since 1h (json, csv, text), stop.
# Everything lands in $OUT/gpu_energy_sleep.tar.gz (packed again after every step), steps in $OUT/steps.tsv.
set -uo pipefail
OUT=${OUT:-/tmp/out} WAIT=${WAIT:-400}
LEVELS=${1:-1,4,8,16} IDLE_S=${2:-30}
R=/tmp/res/gpu_energy_sleep
rm -rf "$R" && mkdir -p "$R" "$OUT"
qt() { python3 -m tui.entry --set server.enable_sleep_mode=true --set "server.sleep_after_idle_s=$IDLE_S" \
  --set console.history_interval_s=2 "$@"; }

step() {  # step NAME CMD...: stdout to $R/NAME.out (stderr to NAME.err), a line to steps.tsv
  local name=$1 t=$SECONDS rc=0; shift
  "$@" > "$R/$name.out" 2> "$R/$name.err" || rc=$?
  printf '%s\t%s\t%s\n' "$name" "$rc" "$((SECONDS - t))" >> "$R/steps.tsv" && cp "$R/steps.tsv" "$OUT/"
  echo "== $name: rc $rc, $((SECONDS - t)) s"
  tar czf "$OUT/gpu_energy_sleep.tar.gz" -C /tmp/res gpu_energy_sleep
  return $rc
}
smi() { nvidia-smi --query-gpu=name,memory.used,memory.total,power.draw,power.limit --format=csv > "$R/smi-$1.txt" 2>&1; }

state() { python3 -m tui.entry status --json 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["state"])'; }

wait_sleeping() {  # the idle timer's sleep: IDLE_S after the last request, plus a sample or two
  local deadline=$((SECONDS + IDLE_S + 120))
  while [ $SECONDS -lt $deadline ]; do
    [ "$(state)" = sleeping ] && { echo "asleep after $((SECONDS - $1)) s of quiet"; return 0; }
    sleep 1
  done
  echo "not asleep after $((IDLE_S + 120)) s"; return 1
}

smi before
if step serve qt serve --detach --wait "$WAIT" --json; then
  smi ready
  step sweep qt bench --sweep "$LEVELS" --output-tokens 256 --json --csv "$R/sweep.csv"
  step sweep-table python3 -c "import json,sys; from backend.bench.sweep import table_lines; \
print('\n'.join(table_lines(json.load(open('$R/sweep.out')))))"
  step bench qt bench --requests 16 --concurrency 8 --max-tokens 128 --json
  step host qt host --json
  quiet=$SECONDS
  step wait-idle-sleep wait_sleeping "$quiet"
  step status-asleep qt status --json
  smi asleep
  # a client's chat while it sleeps: what 0.20.2 answers, and the supervisor's wake on request
  step chat-while-asleep python3 - <<'PY'
import json, time, httpx
t0 = time.time()
try:
    r = httpx.post("http://127.0.0.1:8000/v1/chat/completions", timeout=120, json={
        "model": "qwen2.5-14b",  # /tmp/w/h200.toml's served_model_name
        "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8})
    print(json.dumps({"status": r.status_code, "seconds": round(time.time() - t0, 3), "body": r.text[:500]}))
except httpx.HTTPError as e:
    print(json.dumps({"error": repr(e), "seconds": round(time.time() - t0, 3)}))
PY
  step wait-wake-on-request sh -c 'for i in $(seq 120); do python3 -m tui.entry status --json | grep -q "\"state\": \"ready\"" && exit 0; sleep 1; done; exit 1'
  step status-woken qt status --json
  step sleep-manual qt sleep --json
  step wake qt wake --json
  step status-awake qt status --json
  smi awake
  step bench-after-wake qt bench --requests 1 --concurrency 1 --max-tokens 32 --json
  step history-json qt history --since 1h --json
  step history-csv qt history --since 1h --csv
  step history-text qt history --since 1h
fi
step stop qt stop --json
smi stopped
cp -r /tmp/qthome/state/logs "$R/logs" 2>/dev/null; cp /tmp/qthome/state/history.db "$R/" 2>/dev/null
tar czf "$OUT/gpu_energy_sleep.tar.gz" -C /tmp/res gpu_energy_sleep
