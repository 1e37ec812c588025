#!/usr/bin/env bash
# `qwen-tui doctor --p2p` on the lent H200 (../shared/gpu: vLLM 0.20.2, one GPU):
#   source /tmp/w/env.sh && bash benchmarks/gpu_p2p.sh          carry: [".gpu/bin"]      (about 1 minute)
# 1. doctor --p2p --json as configured (TP=1): expect "nothing to check".
# 2. the same with --set server.tensor_parallel_size=2: expect "nothing to check: one GPU visible".
# 3. the two-rank NCCL path forced onto the one GPU (p2p.run_mode with cuda:0 twice), for each mode: NCCL
#    usually refuses two ranks on one device ("Duplicate GPU detected"); whatever it answers is recorded,
#    with the time it took and proof that no rank was left running.
# Everything lands in $OUT/gpu_p2p.tar.gz, steps in $OUT/steps.tsv.
set -uo pipefail
OUT=${OUT:-/tmp/out}
R=/tmp/res/gpu_p2p
rm -rf "$R" && mkdir -p "$R" "$OUT"
qt() { python3 -m tui.entry "$@"; }

step() {  # step NAME CMD...: stdout to $R/NAME.json (stderr to NAME.err), a line to steps.tsv
  local name=$1 t=$SECONDS rc=0; shift
  "$@" > "$R/$name.json" 2> "$R/$name.err" || rc=$?
  printf '%s\t%s\t%s\n' "$name" "$rc" "$((SECONDS - t))" >> "$R/steps.tsv" && cp "$R/steps.tsv" "$OUT/"
  echo "== $name: rc $rc, $((SECONDS - t)) s"; head -c 600 "$R/$name.json"; echo
  tar czf "$OUT/gpu_p2p.tar.gz" -C /tmp/res gpu_p2p
  return $rc
}

nvidia-smi --query-gpu=name,memory.used,memory.total,driver_version --format=csv > "$R/smi.txt" 2>&1
nvidia-smi topo -m > "$R/topo.txt" 2>&1
step doctor-p2p qt doctor --p2p --json
step doctor-p2p-tp2 qt --set server.tensor_parallel_size=2 doctor --p2p --json
step forced-two-ranks python3 - <<'PY'
import json, os, sys, time
from backend.doctor import p2p
out = []
for mode in (p2p.Mode("as-configured", "NCCL as configured", {}),
             p2p.Mode("p2p-off", "NCCL, NCCL_P2P_DISABLE=1", {"NCCL_P2P_DISABLE": "1"}),
             p2p.Mode("custom-all-reduce", "vLLM's custom all-reduce", {}, "custom")):
    t = time.monotonic()
    r = p2p.run_mode(sys.executable, ["cuda:0", "cuda:0"], "nccl", {**os.environ, **mode.env}, mode, timeout=60)
    d = r.to_dict()
    d["wall_s"] = round(time.monotonic() - t, 1)
    d["left_running"] = [x["pid"] for x in d["ranks"] if os.path.exists(f"/proc/{x['pid']}")]
    out.append(d)
print(json.dumps(out, indent=2))
PY
ps -eo pid,args | grep -c "[p]2p_child.py" > "$R/children_left.txt"
tar czf "$OUT/gpu_p2p.tar.gz" -C /tmp/res gpu_p2p
