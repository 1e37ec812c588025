"""Run the real console headless on a GPU machine and show what its GPU panels say.

    python3 benchmarks/console_gpu_probe.py OUT_DIR

Builds QwenApp with the real GpuMonitor (NVML), made unopened as the console makes it, and a client
that reports a stopped server; times the first GPU panel from the app's start, lets it sample, and
writes OUT_DIR/console.svg (the screen) and OUT_DIR/gpu_panels.json
(each panel's text and the samples behind it). Exit 1 when NVML is not available or no panel shows.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


class StoppedServer:
    """The console's client when no server runs (the probe needs no vLLM)."""

    def poll(self):
        from backend.server.client import Poll

        return Poll(state={"state": "stopped"})

    def close(self) -> None:
        pass


async def main(out: Path) -> int:
    import os

    os.environ.setdefault("QWEN_TUI_HOME", tempfile.mkdtemp())
    from backend.gpu import GpuMonitor
    from backend.settings import load
    from tui.app import make_app
    from tui.widgets.gpu_panel import GpuPanel

    # made as the console makes it (tui/entry.py): NVML is not opened here but by the console, in a
    # thread after its first frame; the probe times the first GPU panel from the app's start
    gpus = GpuMonitor(start=False)
    # something on the card, so the memory bar has a figure to show: 4 GiB through the CUDA driver API
    import subprocess

    from benchmarks.gpu_release_probe import HOLDER

    holder = subprocess.Popen([sys.executable, "-c", HOLDER, json.dumps({"mib": 4096}), HOLDER],
                              stdout=subprocess.PIPE, text=True)
    holder.stdout.readline()  # "held"
    app = make_app(load(), StoppedServer(), gpus)
    result = {}
    import time

    t0 = time.perf_counter()
    async with app.run_test(size=(160, 50)) as pilot:
        while not list(app.screen.query(GpuPanel)) and time.perf_counter() - t0 < 10:
            await asyncio.sleep(0.005)
        result["first_panel_s"] = round(time.perf_counter() - t0, 3)
        result["nvml_opened_by_console"] = gpus.available()
        await pilot.pause(3.5)
        panels = list(app.screen.query(GpuPanel))
        result["panels"] = [{"title": str(p.border_title), "rows": p.last_rows} for p in panels]
        result["samples"] = [s.to_dict() for s in gpus.sample()]
        result["ledger_gpu"] = (app.screen.plan or {}).get("gpu")
        app.save_screenshot("console.svg", str(out))
        app.exit()
    holder.kill()
    if not result.get("nvml_opened_by_console"):
        print(json.dumps({"error": gpus.reason}))
    gpus.shutdown()
    (out / "gpu_panels.json").write_text(json.dumps(result, indent=1, default=str))
    print(json.dumps(result["panels"], indent=1))
    return 0 if result["panels"] else 1


if __name__ == "__main__":
    out = Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    out.mkdir(parents=True, exist_ok=True)
    sys.exit(asyncio.run(main(out)))
