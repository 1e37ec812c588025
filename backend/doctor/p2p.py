"""`qwen-tui doctor --p2p`: do the GPUs really sum right? One process per rank all-reduces a known
tensor (backend/doctor/p2p_child.py), in each mode under a timeout:

- as-configured: NCCL with the server's environment ([server.env] over the inherited one);
- p2p-off: the same with NCCL_P2P_DISABLE=1 (NCCL through host memory);
- custom-all-reduce: vLLM's own all-reduce (the GPU build, unless [server] turns it off).

Each mode is healthy, hang, wrong data, error or skip; the fix says what to put in [server.env] or
[server], as data too. The driver's P2P report is not trusted (a 3090 pair can say "OK" and hang):
only the sums are. On vLLM's CPU build the same code runs over gloo with two processes, so every path
(the timeout, wrong data, the kill of every rank) runs here too. A box with one GPU has nothing to
check. The children listen on 127.0.0.1 only and are killed, with their process groups, after each mode.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, TextIO

from backend.doctor.context import Context, Env
from backend.server.launch import python_for
from backend.settings import Settings

CHILD = Path(__file__).with_name("p2p_child.py")
TIMEOUT_S = 60.0  # one mode's all-reduces, after every rank has imported torch
IMPORT_TIMEOUT_S = 180.0  # importing torch (and vLLM) on a loaded box
ERROR_GRACE_S = 3.0  # after one rank fails: the others' own errors, before they are killed
SIZE_TEXT = {256: "1 KiB", 1 << 20: "4 MiB"}
RESULTS = ("healthy", "hang", "wrong data", "error", "skip")
P2P_FIX = {"section": "server.env", "key": "NCCL_P2P_DISABLE", "value": "1",
           "text": 'add NCCL_P2P_DISABLE = "1" under [server.env] (one run: --set server.env.NCCL_P2P_DISABLE=1)'}
CUSTOM_FIX = {"section": "server", "key": "disable_custom_all_reduce", "value": True,
              "text": "set disable_custom_all_reduce = true under [server] (one run: "
                      "--set server.disable_custom_all_reduce=true): NCCL does the all-reduce"}
NO_FIX = ("NCCL fails with P2P and without it: add NCCL_DEBUG = \"INFO\" under [server.env], run "
          "`qwen-tui doctor --p2p` again and read NCCL's transport lines; check the driver and the PCIe/ACS setup")


@dataclass
class Mode:
    name: str
    label: str
    env: dict[str, str]  # what this mode changes in the server's environment
    kind: str = "torch"  # torch: torch.distributed; custom: vLLM's custom all-reduce
    skip: str | None = None


@dataclass
class ModeResult:
    mode: str
    label: str
    result: str  # one of RESULTS
    detail: str
    seconds: float | None = None
    env: dict[str, str] = field(default_factory=dict)
    ranks: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "label": self.label, "result": self.result, "detail": self.detail,
                "seconds": self.seconds, "env": self.env, "ranks": self.ranks}


class _Rank:
    def __init__(self, rank: int, proc: subprocess.Popen[str], err: IO[bytes]) -> None:
        self.rank, self.proc, self.err = rank, proc, err
        self.events: list[dict[str, Any]] = []
        self.eof = False

    @property
    def stage(self) -> str:
        return str(self.events[-1]["stage"]) if self.events else "starting"

    def has(self, stage: str) -> bool:
        return any(e.get("stage") == stage for e in self.events)

    @property
    def finished(self) -> bool:
        return self.eof or self.stage in ("done", "error", "skip")

    def stderr_tail(self, n: int = 3) -> str:
        try:
            self.err.seek(0)
            lines = [ln for ln in self.err.read().decode(errors="replace").splitlines() if ln.strip()]
        except OSError:
            return ""
        return " | ".join(lines[-n:])[-400:]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _read(r: _Rank, cond: threading.Condition) -> None:
    assert r.proc.stdout is not None
    for line in r.proc.stdout:
        try:
            ev = json.loads(line)
        except ValueError:
            continue  # a library printing on stdout
        if isinstance(ev, dict) and "stage" in ev:
            with cond:
                r.events.append(ev)
                cond.notify_all()
    with cond:
        r.eof = True
        cond.notify_all()


def _kill(ranks: list[_Rank]) -> None:
    """SIGKILL every rank's process group (a rank's own children too), then reap them."""
    for r in ranks:
        try:
            os.killpg(r.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    for r in ranks:
        try:
            r.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL is not refused
            pass


def where(r: _Rank) -> str:
    """Where a rank that did not finish was, in words."""
    if r.has("hanging"):
        return "held before the all-reduce (a test's fault)"
    sizes = [e["size"] for e in r.events if e.get("stage") == "reduced"]
    if r.has("init"):
        nxt = [s for s in SIZE_TEXT if s not in sizes]
        return f"in the all-reduce of {SIZE_TEXT[nxt[0]]}" if nxt else "after the all-reduces"
    if r.has("imported"):
        return "in init_process_group (waiting for the other ranks)"
    return "importing torch"


def run_mode(python: str, devices: list[str], backend: str, env: dict[str, str], mode: Mode,
             timeout: float = TIMEOUT_S, import_timeout: float = IMPORT_TIMEOUT_S,
             faults: dict[int, str] | None = None) -> ModeResult:
    """Spawn one child per device, wait for their sums, kill whatever is left. Never raises on a
    child's failure: that is the result."""
    world, port = len(devices), free_port()
    cond = threading.Condition()
    ranks: list[_Rank] = []
    child_env = {**env, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    for name in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"):  # their sockets on loopback too
        child_env.setdefault(name, "lo")
    child_env.setdefault("OMP_NUM_THREADS", "1")
    started = time.monotonic()
    try:
        for rank, dev in enumerate(devices):
            argv = [python, str(CHILD), "--rank", str(rank), "--world", str(world), "--port", str(port),
                    "--backend", backend, "--device", dev, "--kind", mode.kind, "--timeout", str(timeout)]
            if faults and rank in faults:
                argv += ["--fault", faults[rank]]
            err = tempfile.TemporaryFile()
            proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL, text=True,
                                    env=child_env, start_new_session=True)
            ranks.append(_Rank(rank, proc, err))
            threading.Thread(target=_read, args=(ranks[-1], cond), daemon=True).start()
        with cond:
            cond.wait_for(lambda: all(r.has("imported") or r.finished for r in ranks), timeout=import_timeout)
            t0 = time.monotonic()
            failed_at: float | None = None

            def settled() -> bool:
                nonlocal failed_at
                if all(r.finished for r in ranks):
                    return True
                if failed_at is None and any(r.finished and not r.has("done") for r in ranks):
                    failed_at = time.monotonic()
                return failed_at is not None and time.monotonic() - failed_at >= ERROR_GRACE_S

            while not settled() and time.monotonic() - t0 < timeout:
                cond.wait(timeout=min(0.5, max(0.01, timeout - (time.monotonic() - t0))))
            seconds = round(time.monotonic() - t0, 2)
            unfinished = [r for r in ranks if not r.finished]
            return _classify(mode, ranks, unfinished, seconds, timeout, time.monotonic() - started)
    finally:
        _kill(ranks)
        for r in ranks:
            r.err.close()


def _rank_rows(ranks: list[_Rank]) -> list[dict[str, Any]]:
    return [{"rank": r.rank, "pid": r.proc.pid, "stage": r.stage,
             "error": next((e.get("error") for e in r.events if e.get("stage") == "error"), None)} for r in ranks]


def _classify(mode: Mode, ranks: list[_Rank], unfinished: list[_Rank], seconds: float, timeout: float,
              total: float) -> ModeResult:
    def res(result: str, detail: str) -> ModeResult:
        return ModeResult(mode.name, mode.label, result, detail, seconds, mode.env, _rank_rows(ranks))

    errors = [r for r in ranks if r.stage == "error" or (r.eof and not r.has("done") and not r.has("skip"))]
    if errors:
        parts = []
        for r in errors:
            msg = next((e.get("error") for e in r.events if e.get("stage") == "error"), None)
            code = r.proc.poll()
            parts.append(f"rank {r.rank}: {msg or f'exited with code {code}'}"
                         + (f" ({r.stderr_tail()})" if not msg and r.stderr_tail() else ""))
        return res("error", "; ".join(parts))
    if not all(r.has("imported") or r.finished for r in ranks):
        slow = [r.rank for r in ranks if not r.has("imported")]
        return res("error", f"rank(s) {', '.join(map(str, slow))} did not import torch within {total:.0f} s")
    skips = [r for r in ranks if r.stage == "skip"]
    if skips:
        return res("skip", str(skips[0].events[-1].get("reason") or "skipped"))
    if unfinished:
        return res("hang", f"no result after {timeout:g} s: "
                   + "; ".join(f"rank {r.rank} {where(r)}" for r in unfinished))
    wrong = [(r, e) for r in ranks for e in r.events if e.get("stage") == "reduced" and not e.get("ok")]
    if wrong:
        r, e = wrong[0]
        return res("wrong data", f"rank {r.rank}, {SIZE_TEXT.get(e['size'], e['size'])}: {e['wrong']:,} of "
                   f"{e['size']:,} values wrong (value {e['index']:,}: got {e['got']:g}, want {e['want']:g})"
                   + (f"; {len(wrong) - 1} more tensor(s) wrong" if len(wrong) > 1 else ""))
    sizes = " and ".join(SIZE_TEXT.values())
    return res("healthy", f"{sizes} summed right on all {len(ranks)} ranks in {seconds:.1f} s")


# -- the check as a whole -----------------------------------------------------------------------------
def plan_modes(ctx: Context) -> tuple[str, list[str], list[Mode]] | str:
    """(backend, devices, modes), or why there is nothing to check."""
    if ctx.device == "cpu":
        world = max(2, ctx.world)
        note = " (gloo: NCCL's setting does not apply; the same code as on GPUs)"
        return "gloo", ["cpu"] * world, [
            Mode("as-configured", "as configured", {}),
            Mode("p2p-off", "NCCL_P2P_DISABLE=1" + note, {"NCCL_P2P_DISABLE": "1"}),
            Mode("custom-all-reduce", "vLLM's custom all-reduce", {}, "custom",
                 skip="vLLM's CPU build has no custom all-reduce (its CPU worker turns it off)")]
    if ctx.world < 2:
        return (f"nothing to check: tensor_parallel_size {ctx.tp} x pipeline_parallel_size {ctx.pp} is one GPU, "
                "no all-reduce between GPUs")
    skip = ctx.gpu_skip()
    if skip:
        return f"nothing checked: {skip}"
    n = len(ctx.visible)
    if n < 2:
        return "nothing to check: one GPU visible, no all-reduce between GPUs"
    if n < ctx.world:
        return f"nothing checked: the settings need {ctx.world} GPUs and {n} are visible (see the gpus check)"
    configured = str(ctx.server_env.get("NCCL_P2P_DISABLE", "")).strip() == "1"
    custom_skip = None
    if ctx.server_cfg.disable_custom_all_reduce:
        custom_skip = "off in [server] (disable_custom_all_reduce = true): NCCL does the all-reduce"
    elif ctx.install.distribution != "vllm":
        custom_skip = "no CUDA build of vLLM in the server's interpreter"
    return "nccl", [f"cuda:{i}" for i in range(ctx.world)], [
        Mode("as-configured", "NCCL as configured", {}),
        Mode("p2p-off", "NCCL, NCCL_P2P_DISABLE=1", {"NCCL_P2P_DISABLE": "1"},
             skip="NCCL_P2P_DISABLE=1 is already set" if configured else None),
        Mode("custom-all-reduce", "vLLM's custom all-reduce", {}, "custom", skip=custom_skip)]


def verdict(modes: list[ModeResult]) -> tuple[bool, str, list[dict[str, Any]]]:
    """(ok, message, fixes) from the modes' results."""
    by = {m.mode: m for m in modes}
    cfg, off, ca = by["as-configured"], by.get("p2p-off"), by.get("custom-all-reduce")
    fixes: list[dict[str, Any]] = []
    bad_ca = ca is not None and ca.result not in ("healthy", "skip")
    if cfg.result == "healthy":
        if not bad_ca:
            return True, "healthy: the all-reduce as configured sums right", fixes
        assert ca is not None
        return False, f"vLLM's custom all-reduce: {ca.result} (NCCL is healthy)", [CUSTOM_FIX]
    msg = f"the all-reduce as configured: {cfg.result}"
    if off is not None and off.result == "healthy":
        fixes.append(P2P_FIX)
        msg += "; healthy with NCCL_P2P_DISABLE=1"
    if bad_ca:
        fixes.append(CUSTOM_FIX)
    return False, msg, fixes


def run_p2p(settings: Settings, env: Env | None = None, timeout: float = TIMEOUT_S,
            faults: dict[str, dict[int, str]] | None = None,
            import_timeout: float = IMPORT_TIMEOUT_S) -> dict[str, Any]:
    """The `doctor --p2p --json` object. faults: {mode: {rank: "wrong" | "hang"}}, for tests."""
    ctx = Context(settings, env or Env())
    own_monitor = ctx.monitor is None and ctx.device == "cuda"
    if own_monitor:
        from backend.gpu import GpuMonitor  # NVML bindings only when a monitor is made here

        ctx.monitor = GpuMonitor()
    try:
        planned = plan_modes(ctx)
    finally:
        if own_monitor:
            ctx.monitor.shutdown()
    base: dict[str, Any] = {"settings_source": str(settings.source) if settings.source else None,
                            "timeout_s": timeout, "world_size": ctx.world}
    if isinstance(planned, str):
        return {**base, "ok": True, "result": "nothing to check", "backend": None, "devices": [], "modes": [],
                "message": planned, "fixes": [], "fix": None}
    backend, devices, modes = planned
    results = []
    for m in modes:
        if m.skip:
            results.append(ModeResult(m.name, m.label, "skip", m.skip, env=m.env))
            continue
        results.append(run_mode(python_for(settings), devices, backend, {**ctx.server_env, **m.env}, m,
                                timeout=timeout, import_timeout=import_timeout, faults=(faults or {}).get(m.name)))
    ok, message, fixes = verdict(results)
    if not ok and not fixes and results[0].result != "healthy":
        message += "; no setting fixes it"
    return {**base, "ok": ok, "result": results[0].result, "backend": backend, "devices": devices,
            "world_size": len(devices), "modes": [r.to_dict() for r in results], "message": message,
            "fixes": fixes, "fix": "; ".join(f["text"] for f in fixes) or (None if ok else NO_FIX)}


MARKS = {"healthy": "[ ok ]", "skip": "[skip]", "hang": "[HANG]", "wrong data": "[FAIL]", "error": "[FAIL]"}


def format_text(rep: dict[str, Any]) -> str:
    src = rep["settings_source"] or "built-in defaults"
    if not rep["modes"]:
        return f"qwen-tui doctor --p2p: settings from {src}\n{rep['message']}\n"
    lines = [f"qwen-tui doctor --p2p: {rep['world_size']} ranks over {rep['backend']} "
             f"({', '.join(rep['devices'])}), {rep['timeout_s']:g} s per mode; settings from {src}"]
    width = max(len(m["label"].split(" (")[0]) for m in rep["modes"])
    for m in rep["modes"]:
        lines.append(f"{MARKS.get(m['result'], m['result'])} {m['label'].split(' (')[0]:<{width}}  "
                     f"{m['result']}: {m['detail']}")
    lines.append(rep["message"])
    if rep["fix"]:
        lines.append(f"fix: {rep['fix']}")
    return "\n".join(lines) + "\n"


def run_cli(settings: Settings, as_json: bool, timeout: float = TIMEOUT_S, out: TextIO | None = None) -> int:
    """Exit 0 when the all-reduce is healthy or there is nothing to check, 1 when not (as `doctor`)."""
    out = out or sys.stdout
    rep = run_p2p(settings, timeout=timeout)
    out.write(json.dumps(rep, indent=2) + "\n" if as_json else format_text(rep))
    return 0 if rep["ok"] else 1
