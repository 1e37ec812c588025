"""Run the real console headless on a GPU machine and show what its GPU panels say.

    python3 benchmarks/console_gpu_probe.py OUT_DIR

Builds QwenApp with the real GpuMonitor (NVML) and a client that reports a stopped server, lets it
sample for a few seconds, and writes OUT_DIR/console.svg (the screen) and OUT_DIR/gpu_panels.json
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
        from backend.supervisor_client import Poll

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

    gpus = GpuMonitor()
    if not gpus.available():
        print(json.dumps({"error": gpus.reason}))
        return 1
    # something on the card, so the memory bar has a figure to show: 4 GiB through the CUDA driver API
    import subprocess

    from benchmarks.gpu_release_probe import HOLDER

    holder = subprocess.Popen([sys.executable, "-c", HOLDER, json.dumps({"mib": 4096}), HOLDER],
                              stdout=subprocess.PIPE, text=True)
    holder.stdout.readline()  # "held"
    app = make_app(load(), StoppedServer(), gpus)
    result = {}
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.pause(3.5)
        panels = list(app.screen.query(GpuPanel))
        result["panels"] = [{"title": str(p.border_title), "rows": p.last_rows} for p in panels]
        result["samples"] = [s.to_dict() for s in gpus.sample()]
        result["ledger_gpu"] = (app.screen.plan or {}).get("gpu")
        app.save_screenshot("console.svg", str(out))
        app.exit()
    holder.kill()
    gpus.shutdown()
    (out / "gpu_panels.json").write_text(json.dumps(result, indent=1, default=str))
    print(json.dumps(result["panels"], indent=1))
    return 0 if result["panels"] else 1


if __name__ == "__main__":
    out = Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    out.mkdir(parents=True, exist_ok=True)
    sys.exit(asyncio.run(main(out)))
