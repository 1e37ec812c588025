"""Energy per token for `bench` and `bench --sweep`: NVML power sampled while a level's requests run,
integrated over time (trapezoids), summed over the server's GPUs, then joules per output token and
output tok/s per watt beside tok/s.

It is the GPUs' whole draw (idle power included), which is what the wall socket and a power cap see.
NVML's power reading is itself an average over about a second on recent drivers, so levels shorter
than a few seconds are rough: `power_samples` says how many readings a figure stands on.

No NVML (the CPU demo, no driver): every figure is None and `energy_note` says why; tables and CSV
print "unknown", never 0. Changing a power limit needs root and is the user's call: `cap_command`
prints the `nvidia-smi -pl` line for a cap, nothing here runs it.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from backend.settings import Settings

SAMPLE_S = 0.2
UNKNOWN = "unknown"


def total_power_w(gpus: Any) -> float | None:
    """The monitored GPUs' power draw now, summed; None when any card cannot say."""
    samples = gpus.sample()
    power = [s.power_w for s in samples]
    return float(sum(power)) if power and None not in power else None


class PowerSampler:
    """Reads NVML power every `interval` from a thread while `run()` is awaited (a task the caller cancels)."""

    def __init__(self, gpus: Any, interval: float = SAMPLE_S) -> None:
        self.gpus, self.interval = gpus, interval
        self.points: list[tuple[float, float]] = []  # (time.monotonic(), W)
        self.note: str | None = None
        self.limit_w: float | None = None
        if gpus is None:
            self.note = "no NVML: power not measured"
        elif not gpus.available():
            self.note = f"no NVML ({gpus.reason}): power not measured"
        else:
            limits = [g.power_limit_w for g in gpus.gpus]
            self.limit_w = float(sum(limits)) if limits and None not in limits else None

    @property
    def enabled(self) -> bool:
        return self.note is None

    async def read(self) -> None:
        try:
            w = await asyncio.to_thread(total_power_w, self.gpus)
        except Exception as e:  # noqa: BLE001 - NVML trouble: the figure goes unknown, the load goes on
            self.note = f"NVML power read failed: {type(e).__name__}: {e}"
            return
        if w is None:
            self.note = "NVML gives no power reading for these GPUs"
            return
        self.points.append((time.monotonic(), w))

    async def run(self) -> None:
        while self.enabled:
            await self.read()
            await asyncio.sleep(self.interval)

    def figures(self, output_tokens: int | None, output_tokens_per_s: float | None) -> dict[str, Any]:
        """energy_j, power_w_mean / max, joules_per_output_token, output_tokens_per_s_per_w; None when unknown."""
        out: dict[str, Any] = {"energy_j": None, "power_w_mean": None, "power_w_max": None,
                               "joules_per_output_token": None, "output_tokens_per_s_per_w": None,
                               "power_samples": len(self.points), "power_limit_w": self.limit_w,
                               "energy_note": self.note}
        pts = self.points
        if self.note is not None or len(pts) < 2:
            out["energy_note"] = self.note or "fewer than 2 power readings: the level was too short"
            return out
        joules = sum((t1 - t0) * (w0 + w1) / 2 for (t0, w0), (t1, w1) in zip(pts, pts[1:], strict=False))
        span = pts[-1][0] - pts[0][0]
        mean = joules / span if span > 0 else pts[-1][1]
        out.update(energy_j=round(joules, 1), power_w_mean=round(mean, 1), power_w_max=round(max(w for _, w in pts), 1))
        if output_tokens:
            out["joules_per_output_token"] = round(joules / output_tokens, 4)
        if output_tokens_per_s and mean > 0:
            out["output_tokens_per_s_per_w"] = round(output_tokens_per_s / mean, 4)
        return out


def fmt(value: float | None, spec: str) -> str:
    return UNKNOWN if value is None else format(value, spec)


def cap_command(gpu_indices: list[int], limit_w: float | None, per_gpu_w: float | None = None) -> str | None:
    """The `nvidia-smi -pl` line to try a lower cap (80 % of the limit now, per GPU), for the user to run or not."""
    if limit_w is None or not gpu_indices:
        return None
    watts = per_gpu_w if per_gpu_w is not None else 0.8 * limit_w / len(gpu_indices)
    ids = ",".join(map(str, gpu_indices))
    return (f"sudo nvidia-smi -i {ids} -pl {watts:.0f}   # a cap to compare (needs root; qwen-tui never runs it); "
            f"`sudo nvidia-smi -i {ids} -pl {limit_w / len(gpu_indices):.0f}` puts the limit back")


def monitor_for(settings: Settings) -> Any:
    """A GpuMonitor of the server's GPUs for a CLI run, or None for the CPU build (no NVML to ask)."""
    if settings.planner_cfg.device == "cpu":
        return None
    from backend.gpu import GpuMonitor  # NVML only for a GPU run
    from backend.server.orphans import configured_gpus

    return GpuMonitor(configured_gpus(settings.env))


def line(rep: dict[str, Any]) -> str:
    """The bench summary's line: J per output token and tok/s per W, or "unknown" and why (never 0)."""
    if rep.get("joules_per_output_token") is None:
        return f"  energy        unknown ({rep.get('energy_note') or 'power not measured'})"
    return (f"  energy        {rep['joules_per_output_token']:.3f} J/token, {rep['output_tokens_per_s_per_w']:.3f} "
            f"tok/s per W ({rep['power_w_mean']:.0f} W mean, {rep['power_samples']} readings)")
