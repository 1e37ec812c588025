"""How true the memory ledger is on every real GPU run the project keeps, planned from headers alone.

    .venv/bin/python benchmarks/bench_ledger_truth.py [--json]

Each log in tests/fixtures/gpu/calibration/ (benchmarks/gpu_calibrate.py on the lent H200) is planned
again from its `#` header (settings, NVML memory and reserve, model shape; the compile cache state
read from vLLM's own lines) and compared with what vLLM printed. Prints the error of each figure per
run and the worst; target: every KV-token and max-concurrency error within 5 %.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from backend.ledger.replay import replay  # noqa: E402 - after the path set-up


def main(argv: list[str]) -> int:
    rows = []
    for path in sorted((ROOT / "tests" / "fixtures" / "gpu" / "calibration").glob("*.log")):
        r = replay(path)
        if r is None:
            rows.append({"run": path.stem, "skipped": "header does not say enough"})
            continue
        led = r.ledger
        rows.append({"run": path.stem, "compile_cache": r.compile_cache,
                     "utilization": led.gpu_memory_utilization,
                     "budget_gib": round(led.budget_bytes_per_gpu / 2**30, 2),
                     "kv_tokens_vllm": r.vllm.get("kv_cache_tokens"), "kv_tokens_plan": led.kv_cache_tokens,
                     "kv_tokens_err_pct": round(r.error_pct("kv_cache_tokens") or 0, 2),
                     "concurrency_vllm": r.vllm.get("max_concurrency"),
                     "concurrency_plan": round(led.max_concurrency, 2),
                     "concurrency_err_pct": round(r.error_pct("max_concurrency") or 0, 2)})
    planned = [r for r in rows if "skipped" not in r]
    worst = max((abs(r["kv_tokens_err_pct"]) for r in planned), default=None)
    worst_c = max((abs(r["concurrency_err_pct"]) for r in planned), default=None)
    if "--json" in argv:
        print(json.dumps({"runs": rows, "worst_kv_tokens_err_pct": worst, "worst_concurrency_err_pct": worst_c},
                         indent=1))
    else:
        print(f"{'run':24} {'cache':5} {'util':>5} {'budget':>8} {'KV vLLM':>9} {'KV plan':>9} {'err':>7} "
              f"{'conc vLLM':>9} {'plan':>7} {'err':>7}")
        for r in rows:
            if "skipped" in r:
                print(f"{r['run']:24} skipped: {r['skipped']}")
                continue
            print(f"{r['run']:24} {r['compile_cache']:5} {r['utilization']:5.2f} {r['budget_gib']:7.2f}G "
                  f"{r['kv_tokens_vllm']:>9,} {r['kv_tokens_plan']:>9,} {r['kv_tokens_err_pct']:+6.2f}% "
                  f"{r['concurrency_vllm']:>9} {r['concurrency_plan']:>7} {r['concurrency_err_pct']:+6.2f}%")
        print(f"worst: KV tokens {worst:.2f} %, max concurrency {worst_c:.2f} % over {len(planned)} runs (target 5 %)")
    return 0 if worst is not None and worst <= 5 and worst_c <= 5 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
