"""Sleep and wake on a real GPU (issue 19): what vLLM's sleep mode frees, how fast it comes back.

    source /tmp/w/env.sh && python3 benchmarks/gpu_sleep_probe.py "$OUT"     # on the lent H200 (../shared/gpu)

Each step goes through the project's own CLI (``python3 -m tui.entry``, this working tree's code):
serve with --set server.enable_sleep_mode=true (--detach --wait), GPU memory used (NVML), `sleep --level 1
--json`, NVML again, `status --json` (state sleeping), `report` while asleep, `wake --json` (wake seconds),
NVML, `status --json` (ready), one `chat "hi" --json` answered, then (when the time allows) a level 2 cycle,
and `stop --json`. Checks: sleep frees at least the KV cache (NVML), wake brings READY back in seconds,
status shows both states, the chat after waking is answered.

Writes OUT/sleep_probe.json (re-written after every step, so a cut-off run still brings back what ran),
OUT/report.md (the redacted triage report taken while asleep) and OUT/logs.tar.gz (the server log and
supervisor.log). Exit 1 when a check failed. About 2.5 minutes on an H200 with a cold torch.compile cache
(~105 s of it the first start). Project and standard library only.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
CLI = [sys.executable, "-m", "tui.entry"]
GIB = 1 << 30
BUDGET_S = 230.0  # the whole run must finish within 4 minutes of device time: skip the extras after this
WAKE_MAX_S = 30.0  # "in seconds": a cold start takes 70-130 s here


class Probe:
    def __init__(self, out: Path) -> None:
        self.out = out
        self.t0 = time.time()
        self.record: dict = {"started": time.strftime("%Y-%m-%d %H:%M:%S"), "steps": [], "checks": {},
                             "nvml": {}, "figures": {}}

    def save(self) -> None:
        (self.out / "sleep_probe.json").write_text(json.dumps(self.record, indent=1, default=str))

    def elapsed(self) -> float:
        return time.time() - self.t0

    def cli(self, name: str, *args: str, timeout: float = 300, keep: int = 3000) -> tuple[int, str, str]:
        t = time.time()
        try:
            p = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT)
            rc, out, err = p.returncode, p.stdout, p.stderr
        except subprocess.TimeoutExpired as e:
            out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            rc, err = 124, "timed out"
        step = {"name": name, "argv": list(args), "rc": rc, "seconds": round(time.time() - t, 2),
                "at_s": round(t - self.t0, 1), "stdout": out[-keep:], "stderr": err[-keep:]}
        self.record["steps"].append(step)
        self.save()
        print(f"== {name}: rc {rc}, {step['seconds']} s (at {step['at_s']} s)", flush=True)
        return rc, out, err

    def json_of(self, name: str, *args: str, timeout: float = 300) -> dict:
        _, out, _ = self.cli(name, *args, "--json", timeout=timeout)
        try:
            return json.loads(out[out.index("{"):]) if "{" in out else {}
        except ValueError:
            return {}

    def check(self, name: str, ok: bool, detail: object) -> None:
        self.record["checks"][name] = {"ok": bool(ok), "detail": detail}
        self.save()
        print(f"   [{'ok' if ok else 'FAIL'}] {name}: {str(detail)[:200]}", flush=True)

    def nvml(self, name: str) -> int | None:
        """GPU memory used on every GPU, summed (backend.gpu.GpuMonitor, the project's NVML reader)."""
        from backend.gpu import GpuMonitor

        mon = GpuMonitor()
        try:
            samples = mon.sample()
            used = [s.memory_used_bytes for s in samples]
            total = sum(used) if used and None not in used else None
            self.record["nvml"][name] = {"used_bytes": total, "used_gib": round(total / GIB, 2) if total else None,
                                         "per_gpu": [s.to_dict() for s in samples], "reason": mon.reason,
                                         "at_s": round(self.elapsed(), 1)}
        finally:
            mon.shutdown()
        self.save()
        print(f"   NVML {name}: {self.record['nvml'][name]['used_gib']} GiB used", flush=True)
        return total

    def pack_logs(self) -> None:
        from backend.server import statefile

        logs = statefile.logs_dir()
        try:
            with tarfile.open(self.out / "logs.tar.gz", "w:gz") as tar:
                for f in sorted(logs.glob("*.log")):
                    tar.add(f, arcname=f.name)
        except OSError as e:
            self.record["logs_error"] = str(e)
            self.save()


def _gib(b: int | float | None) -> str:
    return "?" if b is None else f"{b / GIB:.2f} GiB"


def cycle(p: Probe, level: int, chat: bool) -> None:
    before = p.nvml(f"before_sleep_{level}")
    op = p.json_of(f"sleep-{level}", "sleep", "--level", str(level))
    p.check(f"sleep_level_{level}_ok", op.get("ok") is True, op.get("message") or op)
    asleep = p.nvml(f"asleep_{level}")
    st = p.json_of(f"status-asleep-{level}", "status")
    p.check(f"status_sleeping_{level}", st.get("state") == "sleeping" and st.get("sleep_level") == level,
            {k: st.get(k) for k in ("state", "detail", "sleep_level", "slept_at", "gpu_memory_freed_bytes")})
    kv_gib = st.get("kv_cache_gib")
    freed = before - asleep if before is not None and asleep is not None else None
    p.record["figures"][f"level_{level}"] = {"nvml_before_gib": _gib(before), "nvml_asleep_gib": _gib(asleep),
                                             "nvml_freed_gib": _gib(freed), "kv_cache_gib": kv_gib,
                                             "supervisor_freed_gib": _gib(st.get("gpu_memory_freed_bytes")),
                                             "sleep_seconds": op.get("seconds")}
    p.check(f"sleep_{level}_frees_at_least_the_kv_cache",
            freed is not None and isinstance(kv_gib, (int, float)) and freed >= 0.95 * kv_gib * GIB,
            f"NVML {_gib(before)} -> {_gib(asleep)} (freed {_gib(freed)}); KV cache {kv_gib} GiB")
    if level == 1 and chat:
        p.cli("report-asleep", "report", "--out", str(p.out / "report.md"), timeout=120)
    op = p.json_of(f"wake-{level}", "wake")
    wake_s = op.get("wake_seconds")
    p.check(f"wake_{level}_ok", op.get("ok") is True and isinstance(wake_s, (int, float)) and wake_s < WAKE_MAX_S,
            op.get("message") or op)
    awake = p.nvml(f"awake_{level}")
    st = p.json_of(f"status-awake-{level}", "status")
    p.check(f"status_ready_after_wake_{level}", st.get("state") == "ready" and st.get("wake_seconds") is not None,
            {k: st.get(k) for k in ("state", "detail", "wake_seconds", "sleep_level")})
    p.record["figures"][f"level_{level}"].update(wake_seconds=wake_s, nvml_awake_gib=_gib(awake),
                                                 wake_call_seconds=op.get("seconds"))
    p.save()
    if chat:
        reply = p.json_of(f"chat-after-wake-{level}", "chat", "hi", timeout=120)
        p.check(f"chat_after_wake_{level}", (reply.get("completion_tokens") or 0) > 0 and not reply.get("error"),
                {k: reply.get(k) for k in ("completion_tokens", "ttft_s", "tokens_per_s", "finish_reason", "error")})


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    p = Probe(out)
    p.record["env"] = {k: os.environ.get(k) for k in ("QWEN_TUI_CONFIG", "QWEN_TUI_HOME")}
    try:
        p.nvml("before_serve")
        st = p.json_of("serve", "--set", "server.enable_sleep_mode=true", "serve", "--detach", "--wait", "200",
                       timeout=230)
        p.check("serve_ready", st.get("state") == "ready",
                {k: st.get(k) for k in ("state", "detail", "kv_cache_gib", "kv_cache_tokens", "sleep_enabled")})
        if st.get("state") == "ready":
            p.check("sleep_enabled_in_status", st.get("sleep_enabled") is True, st.get("sleep_enabled"))
            cycle(p, 1, chat=True)
            if p.elapsed() < BUDGET_S - 40:
                cycle(p, 2, chat=False)
            else:
                p.record["skipped"] = f"level 2 cycle: {p.elapsed():.0f} s used"
    finally:
        stop = p.json_of("stop", "stop", timeout=90)
        p.check("stopped", stop.get("ok") is True, stop.get("summary"))
        p.nvml("after_stop")
        p.pack_logs()
        p.record["seconds"] = round(p.elapsed(), 1)
        p.save()
    failed = [k for k, v in p.record["checks"].items() if not v["ok"]]
    print(json.dumps(p.record["figures"], indent=1))
    print(f"{len(p.record['checks']) - len(failed)}/{len(p.record['checks'])} checks ok in {p.elapsed():.0f} s"
          + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
