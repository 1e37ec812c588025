#!/usr/bin/env bash
# Idle sleep and the automatic wake on the lent H200 (../shared/gpu: vLLM 0.20.2, the 14B shape, TP=1), headless:
#   source /tmp/w/env.sh && bash benchmarks/gpu_autowake.sh          carry: [".gpu/bin"]      (about 3 minutes)
# 1. serve with server.enable_sleep_mode and sleep_after_idle_s=15 (the launch adds --enable-server-load-tracking) and the recorder
#    sampling every second; 2. wait for `sleeping` (nvidia-smi then); 3. a chat sent to the sleeping server:
#    the supervisor sees it in GET /load and wakes the engine; the reply's time is the wake plus the answer;
#    4. status --json (awake, READY), history, stop. Everything in $OUT/gpu_autowake.tar.gz, steps in steps.tsv.
set -uo pipefail
OUT=${OUT:-/tmp/out} WAIT=${WAIT:-400}
R=/tmp/res/gpu_autowake
rm -rf "$R" && mkdir -p "$R" "$OUT"
qt() { python3 -m tui.entry --set server.enable_sleep_mode=true --set server.sleep_after_idle_s=15 \
  --set console.history_interval_s=1 "$@"; }
state() { qt status --json 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["state"])' 2>/dev/null; }

step() {  # step NAME CMD...: stdout to $R/NAME.json (stderr to NAME.err), a line to steps.tsv
  local name=$1 t=$SECONDS rc=0; shift
  "$@" > "$R/$name.json" 2> "$R/$name.err" || rc=$?
  printf '%s\t%s\t%s\n' "$name" "$rc" "$((SECONDS - t))" >> "$R/steps.tsv" && cp "$R/steps.tsv" "$OUT/"
  echo "== $name: rc $rc, $((SECONDS - t)) s"; head -c 600 "$R/$name.json"; echo
  tar czf "$OUT/gpu_autowake.tar.gz" -C /tmp/res gpu_autowake
  return $rc
}

step serve qt serve --detach --wait "$WAIT" --json || { qt stop --json; exit 1; }
step smi-ready nvidia-smi --query-gpu=memory.used,memory.total --format=csv
t=$SECONDS; st=""
while [ $((SECONDS - t)) -lt 120 ]; do st=$(state); [ "$st" = sleeping ] && break; sleep 1; done
printf 'asleep_after_s\t%s\t%s\n' "$st" "$((SECONDS - t))" >> "$R/steps.tsv"
step status-asleep qt status --json
step smi-asleep nvidia-smi --query-gpu=memory.used,memory.total --format=csv
# the chat goes to the sleeping server, as a teammate's client would: nothing but the API port in between
step chat-wakes timeout 240 python3 -m tui.entry chat --json --max-tokens 16 "Say hello."
step status-woken qt status --json
step smi-woken nvidia-smi --query-gpu=memory.used,memory.total --format=csv
step history qt history --since 1h --json
step stop qt stop --json
cp -r "$(python3 -c 'from backend import paths; print(paths.state_dir())')/logs" "$R/" 2>/dev/null
tar czf "$OUT/gpu_autowake.tar.gz" -C /tmp/res gpu_autowake
