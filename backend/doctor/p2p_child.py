"""One rank of `qwen-tui doctor --p2p`: run as a script by backend/doctor/p2p.py, under the server's
interpreter (the one with vLLM's torch), so it imports nothing of qwen-tui.

It all-reduces tensors whose every element is known ((i % 251 + 1) * (rank + 1)), so a sum that is off
anywhere (a broken P2P path often corrupts only part of a buffer) is found, and prints one JSON line
per stage on stdout: imported, init, reduced (per size), then done or error. The parent reads the
stages to tell a hang (where each rank was) from an error or wrong data.

`--fault wrong` adds 0.5 to one element of this rank's tensor, `--fault hang` never enters the
all-reduce: the tests' way to drive the wrong-data and hang paths for real.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import timedelta
from typing import Any

# 1 KiB and 4 MiB of float32: NCCL picks different protocols for small and large messages, and 4 MiB
# stays under vLLM's custom all-reduce's 8 MiB buffer
SIZES = (256, 1 << 20)


def emit(stage: str, **kw: Any) -> None:
    print(json.dumps({"stage": stage, **kw}), flush=True)


def pattern(torch: Any, n: int, scale: float) -> Any:
    return (torch.arange(n, dtype=torch.float32) % 251 + 1) * scale


def check(torch: Any, out: Any, n: int, world: int) -> dict[str, Any]:
    want = pattern(torch, n, world * (world + 1) / 2)
    got = out.detach().to("cpu").float()
    bad = (got != want).nonzero().flatten()
    if not len(bad):
        return {"ok": True, "size": n}
    i = int(bad[0])
    return {"ok": False, "size": n, "wrong": int(len(bad)), "index": i,
            "got": float(got[i]), "want": float(want[i])}


def custom_reducer(torch: Any, dist: Any, device: Any) -> Any:
    """vLLM's custom all-reduce over a gloo group (what its workers build), or a reason it is off."""
    try:
        # only the custom mode, on vLLM's CUDA build, needs vLLM (seconds to import)
        from vllm.distributed.device_communicators.custom_all_reduce import CustomAllreduce
    except ImportError as e:
        return f"this vLLM has no custom all-reduce to test ({e})"

    group = dist.new_group(backend="gloo")
    ca = CustomAllreduce(group=group, device=device)
    if getattr(ca, "disabled", True):
        return "vLLM turned its custom all-reduce off on this box (its log says why; it then uses NCCL)"
    return ca


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--world", type=int, required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--backend", choices=("gloo", "nccl"), required=True)
    ap.add_argument("--device", required=True, help="cpu or cuda:N")
    ap.add_argument("--kind", choices=("torch", "custom"), default="torch")
    ap.add_argument("--timeout", type=float, default=60)
    ap.add_argument("--fault", choices=("wrong", "hang"))
    a = ap.parse_args(argv)
    try:
        # in here, so that a missing torch is reported as this rank's error line
        import torch
        import torch.distributed as dist
    except Exception as e:  # noqa: BLE001 - reported to the parent, which says what to install
        emit("error", error=f"cannot import torch: {type(e).__name__}: {e}")
        return 1
    emit("imported")
    try:
        device = torch.device(a.device)
        if device.type == "cuda":
            torch.cuda.set_device(device)
        dist.init_process_group(a.backend, init_method=f"tcp://127.0.0.1:{a.port}", rank=a.rank,
                                world_size=a.world, timeout=timedelta(seconds=a.timeout))
        emit("init")
        reducer = custom_reducer(torch, dist, device) if a.kind == "custom" else None
        if isinstance(reducer, str):
            emit("skip", reason=reducer)
            return 0
        results = []
        for n in SIZES:
            t = pattern(torch, n, a.rank + 1).to(device)
            if a.fault == "wrong":
                t[n // 2] += 0.5
            if a.fault == "hang":
                emit("hanging")
                while True:  # the parent's timeout must find this and kill it
                    time.sleep(3600)
            if reducer is not None:
                out = reducer.custom_all_reduce(t)
                if out is None:
                    emit("skip", reason=f"vLLM's custom all-reduce declined a {n * 4}-byte tensor")
                    return 0
            else:
                dist.all_reduce(t)
                out = t
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            results.append(check(torch, out, n, a.world))
            emit("reduced", **results[-1])
        emit("done", ok=all(r["ok"] for r in results))
        try:
            dist.destroy_process_group()
        except Exception:  # noqa: BLE001 - the result is already out
            pass
        return 0
    except Exception as e:  # noqa: BLE001 - the parent reports it as this mode's "error"
        emit("error", error=f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
