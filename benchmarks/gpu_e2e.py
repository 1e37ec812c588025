"""The whole console against real vLLM (CUDA build) on a GPU machine, as a user would drive it.

    source /tmp/w/env.sh && python3 benchmarks/gpu_e2e.py "$OUT"      # on the lent H200 (../shared/gpu)

Steps, each through the project's own CLI (``python3 -m tui.entry``, the code of this working tree):
plan, doctor, serve --detach --wait to READY, status, chat (twice: the first after READY is slow),
bench, the console headless against the live server (real NVML), kill -9 of the API server with an
orphan scan every 0.1 s while the supervisor reaps (none may be reported), the restart to READY,
stop (GPU memory released, 0 MiB used), then a config that cannot fit (utilization 0.17 ≈ one 24 GB
card) that must fail once as ``no_cache_memory``, not be restarted, and be reported by serve --wait.

Writes OUT/gpu_e2e.json (re-written after every step, so a cut-off run still brings back what ran)
and OUT/logs.tar.gz (every server log and supervisor.log). Exit 1 when a check failed.
Runs in about 5-6 minutes on an H200 (a cold torch.compile cache adds ~30 s to the first start).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
CLI = [sys.executable, "-m", "tui.entry"]


class Run:
    def __init__(self, out: Path) -> None:
        self.out = out
        self.t0 = time.time()
        self.record: dict = {"started": time.strftime("%Y-%m-%d %H:%M:%S"), "steps": [], "checks": {}}

    def save(self) -> None:
        (self.out / "gpu_e2e.json").write_text(json.dumps(self.record, indent=1, default=str))

    def cli(self, name: str, *args: str, timeout: float = 400, keep: int = 4000) -> tuple[int, str, str]:
        t = time.time()
        try:
            p = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout)
            rc, out, err = p.returncode, p.stdout, p.stderr
        except subprocess.TimeoutExpired as e:
            rc, out, err = 124, (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or ""), \
                "timed out"
        step = {"name": name, "argv": list(args), "rc": rc, "seconds": round(time.time() - t, 2),
                "at_s": round(t - self.t0, 1), "stdout": out[-keep:], "stderr": err[-keep:]}
        self.record["steps"].append(step)
        self.save()
        print(f"== {name}: rc {rc}, {step['seconds']} s", flush=True)
        return rc, out, err

    def json_of(self, name: str, *args: str, timeout: float = 400) -> dict:
        rc, out, _ = self.cli(name, *args, "--json", timeout=timeout)
        try:
            return json.loads(out[out.index("{"):]) if "{" in out else {}
        except ValueError:
            return {}

    def check(self, name: str, ok: bool, detail: object) -> None:
        self.record["checks"][name] = {"ok": bool(ok), "detail": detail}
        self.save()
        print(f"   [{'ok' if ok else 'FAIL'}] {name}: {str(detail)[:200]}", flush=True)


def smi_used_mib() -> list[int]:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=20).stdout
        return [int(x) for x in out.split()]
    except (OSError, ValueError, subprocess.SubprocessError):
        return []


def status() -> dict:
    from backend.server import client as supervisor_client

    return supervisor_client.status().to_dict()  # a plain dict: the record is written as JSON


def wait_state(want: tuple[str, ...], timeout: float) -> dict:
    deadline = time.time() + timeout
    st = status()
    while st.get("state") not in want and time.time() < deadline:
        time.sleep(0.2)
        st = status()
    return st


async def console_probe(out: Path) -> dict:
    """The real console, headless, attached to the live server with the real NVML."""
    from backend.gpu import GpuMonitor
    from backend.server.client import ServerClient
    from backend.settings import load
    from backend.spawn import Origin
    from tui.app import make_app

    gpus = GpuMonitor(start=False)  # as the console makes it (tui/entry.py): opened after the first frame
    app = make_app(load(), ServerClient(Origin()), gpus)
    text = ""
    async with app.run_test(size=(160, 50)) as pilot:
        for _ in range(60):
            await pilot.pause(0.5)
            text = re.sub(r"<[^>]+>", "", app.export_screenshot()).replace("&#160;", " ")
            if "READY" in text and "GiB" in text:
                break
        await pilot.pause(2.0)  # two GPU samples
        app.save_screenshot("console.svg", str(out))
        text = re.sub(r"<[^>]+>", "", app.export_screenshot()).replace("&#160;", " ")
        app.exit()
    gpus.shutdown()
    return {"shows_ready": "READY" in text, "text_excerpt": " ".join(text.split())[:3000]}


def kill9_and_watch(run: Run) -> None:
    from backend.server import orphans

    st = status()
    api, sup = st.get("pid"), st.get("supervisor_pid")
    t_kill = time.time()
    os.kill(api, signal.SIGKILL)
    false_orphans, snaps, reaping_seen = [], [], set()
    while time.time() - t_kill < 20:
        st = status()
        scan = orphans.scan({})
        reaping_seen.update(st.get("reaping_pids") or [])
        snaps.append({"t": round(time.time() - t_kill, 2), "state": st.get("state"),
                      "reaping": st.get("reaping_pids"), "orphans": scan.pids,
                      "last_failure": (st.get("last_failure") or {}).get("kind")})
        false_orphans += [p for p in scan.pids if p in reaping_seen or p == sup]
        if st.get("state") in ("backoff", "starting") and snaps[-1]["t"] > 1:
            break
        time.sleep(0.1)
    run.record["kill9"] = {"api_pid": api, "supervisor_pid": sup, "snapshots": snaps[:80],
                           "reaping_seen": sorted(reaping_seen)}
    run.check("kill9_no_false_orphan", not false_orphans, {"false_orphans": sorted(set(false_orphans)),
                                                            "reaping_seen": sorted(reaping_seen)})
    st = wait_state(("ready", "failed", "stopped"), 300)
    run.record["kill9"]["after"] = {k: st.get(k) for k in ("state", "restarts", "detail", "stop_report",
                                                           "last_failure", "gpu_release")}
    run.check("kill9_restarted_ready", st.get("state") == "ready" and st.get("restarts", 0) >= 1,
              {"state": st.get("state"), "restarts": st.get("restarts"),
               "released": (st.get("gpu_release") or {}).get("released_bytes"),
               "stop_report": st.get("stop_report")})


def main(out: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    run = Run(out)
    run.record["smi_before_mib"] = smi_used_mib()
    plan = run.json_of("plan", "plan")
    run.record["plan"] = {k: plan.get(k) for k in ("fits", "kv_cache_tokens", "kv_cache_gib", "max_concurrency",
                                                   "decode_tokens_per_s_ceiling", "weights_gib_per_gpu")}
    doctor = run.json_of("doctor", "doctor")
    fails = [c for c in doctor.get("checks", []) if c.get("status") == "fail"]
    run.check("doctor_no_false_failure", not fails, fails or [f"{c['name']}: {c['status']}"
                                                             for c in doctor.get("checks", [])])
    served = run.json_of("serve", "serve", "--detach", "--wait", "400", timeout=460)
    run.check("ready", served.get("state") == "ready",
              {k: served.get(k) for k in ("state", "detail", "kv_cache_tokens", "max_concurrency", "vllm_version",
                                          "weights_gib", "failure")})
    if served.get("state") == "ready":
        run.json_of("status", "status")
        chats = [run.json_of(f"chat{i}", "chat", "Write a long story about a GPU.", "--max-tokens", "256")
                 for i in (1, 2)]
        run.record["chat"] = chats
        c = chats[-1]
        ceiling = c.get("decode_tokens_per_s_ceiling")
        tps = c.get("tokens_per_s")
        run.check("chat_below_ceiling", c.get("completion_tokens") and tps and ceiling and tps <= ceiling
                  and c.get("ttft_s") is not None and c["ttft_s"] < 2.0,
                  {"ttft_s": c.get("ttft_s"), "tokens_per_s": tps, "ceiling": ceiling,
                   "tokens": c.get("completion_tokens")})
        bench = run.json_of("bench", "bench", "--requests", "64", "--concurrency", "16", "--max-tokens", "128")
        run.record["bench"] = bench
        run.check("bench_no_failed_request", bench.get("failed") == 0 and bench.get("completed") == 64,
                  {k: bench.get(k) for k in ("completed", "failed", "output_tokens_per_s", "ttft_ms", "error")})
        try:
            run.record["console"] = asyncio.run(console_probe(out))
            run.check("console_shows_ready", run.record["console"]["shows_ready"], "headless console, real NVML")
        except Exception as e:  # noqa: BLE001 - the record says what broke; the stop below must still run
            run.check("console_shows_ready", False, f"{type(e).__name__}: {e}")
        kill9_and_watch(run)
    stop = run.json_of("stop", "stop")
    time.sleep(1.0)
    used = smi_used_mib()
    run.record["stop"] = stop
    run.check("stop_released", stop.get("ok") and used and max(used) == 0,
              {"summary": stop.get("summary"), "smi_used_mib": used})
    # a config that can never fit: the weights alone exceed 0.17 of the card
    small = run.json_of("serve_util017", "--set", "server.gpu_memory_utilization=0.17", "serve", "--detach",
                        "--wait", "300", timeout=360)
    fail_step = run.record["steps"][-1]
    deadline = time.time() + 30
    while status().get("supervisor_pid") and time.time() < deadline:
        time.sleep(0.5)
    final = status()
    run.record["util017"] = {"serve": small, "final": final, "serve_stderr": fail_step["stderr"]}
    kind = (final.get("failure") or final.get("last_failure") or {}).get("kind")
    run.check("util017_no_cache_memory_not_restarted",
              kind == "no_cache_memory" and final.get("restarts", 0) == 0 and fail_step["rc"] == 1
              and "no_cache_memory" in fail_step["stderr"],
              {"kind": kind, "restarts": final.get("restarts"), "serve_rc": fail_step["rc"],
               "serve_stderr": fail_step["stderr"][-600:]})
    time.sleep(1.0)
    used = smi_used_mib()
    run.check("gpu_empty_at_end", used and max(used) == 0, {"smi_used_mib": used})
    run.record["seconds"] = round(time.time() - run.t0, 1)
    run.save()
    from backend.server import statefile

    with tarfile.open(out / "logs.tar.gz", "w:gz") as tar:
        tar.add(statefile.logs_dir(), arcname="logs")
    bad = [k for k, v in run.record["checks"].items() if not v["ok"]]
    print(f"checks: {len(run.record['checks']) - len(bad)} ok, {len(bad)} failed {bad}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/gpu_e2e")))
