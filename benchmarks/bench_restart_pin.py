"""Restart to READY with and without the KV cache pinned from the learned breakdown (issue 27), on the demo.

    flock /tmp/qwen-tui-vllm.lock .venv/bin/python benchmarks/bench_restart_pin.py [--json] [--rounds N]

One learning launch (enforce_eager, so vLLM's CPU worker may skip its warm-up once the size is explicit:
cpu_worker.py `_should_warm_up_model`), then N rounds of: a restart as configured, and a restart with
server.kv_cache_memory_bytes = the plan's basis.pin (what the worker set at the learning launch). Prints seconds
from `serve` to READY for each and the ratio pinned / unpinned, and checks the pinned start got the same KV
tokens. A scratch QWEN_TUI_HOME; nothing of the user's is touched.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BASE = ("server.enforce_eager=true",)


def _cli(home: Path, *args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "QWEN_TUI_HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "backend.cli", "--demo", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def launch(home: Path, sets: tuple[str, ...]) -> dict[str, Any]:
    args = [a for s in sets for a in ("--set", s)]
    t = time.monotonic()
    r = _cli(home, *args, "serve", "--detach", "--wait", "600", "--json")
    seconds = time.monotonic() - t
    try:
        st = json.loads(_cli(home, "status", "--json", timeout=60).stdout)
    finally:
        _cli(home, "stop", "--json", timeout=180)
    if st.get("state") != "ready":
        raise RuntimeError(f"not ready: {r.stdout[-300:]} {r.stderr[-300:]}")
    return {"seconds": round(seconds, 1), "kv_cache_tokens": st.get("kv_cache_tokens")}


def main(argv: list[str]) -> int:
    rounds = int(argv[argv.index("--rounds") + 1]) if "--rounds" in argv else 1
    home = Path(tempfile.mkdtemp(prefix="qt-pin-"))
    try:
        first = launch(home, BASE)
        plan = json.loads(_cli(home, *[a for s in BASE for a in ("--set", s)], "plan", "--json", timeout=120).stdout)
        pin = (plan.get("basis") or {}).get("pin")
        if not pin:
            print("no pin offered after the learning launch", file=sys.stderr)
            return 1
        pinned_sets = BASE + (f"server.kv_cache_memory_bytes={pin['kv_cache_memory_bytes']}",)
        rows = []
        for _ in range(rounds):
            rows.append({"plain": launch(home, BASE), "pinned": launch(home, pinned_sets)})
    finally:
        shutil.rmtree(home, ignore_errors=True)
    plain = statistics.median(r["plain"]["seconds"] for r in rows)
    pinned = statistics.median(r["pinned"]["seconds"] for r in rows)
    # the pin is the learned KV size rounded down to a MiB: the same cache within a block or two
    same = all(abs(r["pinned"]["kv_cache_tokens"] - first["kv_cache_tokens"]) <= 0.01 * first["kv_cache_tokens"]
               for r in rows)
    out = {"learning_launch": first, "pin": pin, "rounds": rows, "plain_s": plain, "pinned_s": pinned,
           "ratio_pinned_over_plain": round(pinned / plain, 3), "pinned_kv_same_as_learned": same}
    if "--json" in argv:
        print(json.dumps(out, indent=1))
    else:
        print(f"learning launch {first['seconds']} s, {first['kv_cache_tokens']:,} KV tokens; "
              f"pin kv_cache_memory_bytes={pin['kv_cache_memory_bytes']}")
        for i, r in enumerate(rows):
            print(f"round {i + 1}: restart {r['plain']['seconds']} s, pinned {r['pinned']['seconds']} s "
                  f"({r['pinned']['kv_cache_tokens']:,} tokens)")
        print(f"to READY: pinned / plain = {out['ratio_pinned_over_plain']} (median of {rounds}); "
              f"same KV cache as learned: {same}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
