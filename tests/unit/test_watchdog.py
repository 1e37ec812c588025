"""The hang watchdog and the stack dump: deadlines from the last start of the same settings; a real
supervisor over a stand-in interpreter that enters "loading weights" and stops logging -> the status
says so, and the stall clears when the phase ends; py-spy's dump of a real stuck Python process lands
in `qwen-tui report`."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time

import pytest

from backend import stacks
from backend.server import client as supervisor_client
from backend.server import startup_history, statefile, watchdog
from backend.server.launch import Launch, VllmInstall
from backend.server.statefile import argv_hash
from backend.server.supervisor import Supervisor
from backend.settings import load
from tests.helpers.supervisor import until


def test_deadline_from_history_or_a_generous_default():
    assert watchdog.deadline("loading_weights", 40.0) == 120.0  # 3 x 40 s
    assert watchdog.deadline("loading_weights", 5.0) == 65.0  # at least a minute more
    assert watchdog.deadline("loading_weights", None) == 1800.0
    assert watchdog.check("starting", "loading_weights", 1000.0, {"loading_weights": 40.0}, now=1100.0) is None
    stall = watchdog.check("starting", "loading_weights", 1000.0, {"loading_weights": 40.0}, now=1360.0)
    assert stall["text"] == "loading weights for 6 min (usually 40 s)" and stall["dump"] == "qwen-tui stacks"
    stall = watchdog.check("starting", "cuda_graphs", 0.0, {}, now=1300.0)
    assert stall["text"] == "capturing CUDA graphs for 22 min (no earlier start of these settings; the limit is 20 min)"
    assert watchdog.check("ready", "loading_weights", 0.0, {}, now=1e9) is None


# a stand-in vLLM: the lines that open "loading weights", then silence until the test lets it go on
HOLD = r"""
import os, sys, time
print("INFO 12-02 10:00:00 [api_server.py:1] vLLM API server version 0.32.0", flush=True)
print("(EngineCore pid=2) INFO 12-02 10:00:01 [gpu_model_runner.py:1] Starting to load model /m...", flush=True)
while not os.path.exists(sys.argv[1]):
    time.sleep(0.05)
print("(EngineCore pid=2) INFO 12-02 10:00:09 [gpu_model_runner.py:2] Model loading took 0.01 GiB memory and "
      "0.1 seconds", flush=True)
while True:
    time.sleep(1)
"""


async def test_a_start_that_stops_logging_is_reported_and_clears_when_the_phase_ends(qhome, tmp_path, monkeypatch):
    go = tmp_path / "go"
    settings = load(None, overrides=["console.stop_timeout=5", "server.port=1"])
    launch = Launch([sys.executable, "-c", HOLD, str(go)], {}, VllmInstall(None, None, sys.executable), [])
    startup_history.record(argv_hash(launch.argv), 2.0, statefile.state_path().parent / "startups.json",
                           {"starting": 0.5, "loading_weights": 0.3, "profiling": 1.2})
    monkeypatch.setattr(watchdog, "MARGIN_S", 1.0)  # 0.3 s usual: stalled after 1.3 s, not a minute
    sup = Supervisor(settings, launch, restart="never")
    run = asyncio.create_task(sup.run())
    try:
        await until(lambda: supervisor_client.stall_of(sup.status()) is not None, timeout=30)
        got = supervisor_client.stall_of(sup.status())
        assert got["phase"] == "loading_weights" and got["text"].startswith("loading weights for ")
        assert got["text"].endswith("(usually 0.3 s)") and got["elapsed_s"] >= 1.3
        go.touch()  # the phase ends: profiling has 1.2 s usual, so the next deadline is 2.2 s away
        await until(lambda: sup.status()["figures"]["phase"] == "profiling", timeout=30)
        assert supervisor_client.stall_of(sup.status()) is None
    finally:
        sup.request_stop()
        await asyncio.wait_for(run, 30)


def test_status_json_carries_the_stall(qhome, tmp_path, capsys):
    from backend.cli import main
    from tests.helpers.fake_supervisor import start_fake_supervisor

    proc, write = start_fake_supervisor(tmp_path)
    try:
        startup_history.record("abc", 60.0, statefile.state_path().parent / "startups.json",
                               {"loading_weights": 40.0})
        write(state="starting", argv_hash="abc", phase_since=time.time() - 360,
              figures={"phase": "loading_weights"})
        main(["status", "--json"])
        st = __import__("json").loads(capsys.readouterr().out)
        assert st["stall"]["text"] == "loading weights for 6 min (usually 40 s)", st
        main(["status"])
        assert "stalled: loading weights for 6 min (usually 40 s): `qwen-tui stacks` dumps" in capsys.readouterr().out
    finally:
        proc.kill()
        proc.wait()


STUCK = ("import time\ndef stuck_here():\n    while True:\n        time.sleep(0.2)\n"
         "print('in', flush=True)\nstuck_here()\n")


@pytest.mark.skipif(stacks.py_spy() is None, reason="py-spy is not installed (the [debug] extra)")
def test_the_stack_dump_of_a_stuck_python_process_lands_in_the_report(qhome, tmp_path):
    from backend import report

    proc = subprocess.Popen([sys.executable, "-c", STUCK], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "in\n"  # its frames are there
        log = str(tmp_path / "vllm.log")
        d = stacks.dump([proc.pid], log_path=log)
        assert d["tool"].startswith("py-spy") and d["processes"][0]["error"] is None
        assert "stuck_here (<string>:4)" in d["processes"][0]["text"]
        path = stacks.save(d)
        assert stacks.latest(log)["path"] == str(path) and stacks.latest("other.log") is None
        data = {"stacks": stacks.latest(log)}
        text = report.render({**_minimal_report(), **data}, None)
        assert "## Stacks of the server's processes" in text and "stuck_here (<string>:4)" in text
    finally:
        proc.kill()
        proc.wait()


def test_without_py_spy_the_kernel_view_says_how_to_get_python_stacks(monkeypatch):
    monkeypatch.setattr(stacks, "py_spy", lambda: None)
    proc = subprocess.Popen([sys.executable, "-c", STUCK], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "in\n"
        d = stacks.dump([proc.pid])
        assert "pip install 'qwen-tui[debug]'" in d["tool"]
        assert d["processes"][0]["text"].startswith(f"thread {proc.pid} (python")
    finally:
        proc.kill()
        proc.wait()


def _minimal_report() -> dict:
    return {"generated_at": time.strftime("%Y-%m-%d"), "versions": {k: "x" for k in (
        "qwen_tui", "vllm", "vllm_python", "torch", "cuda", "driver", "cuda_driver", "python", "os")},
        "gpus": {"available": False, "reason": "none"}, "server": {"state": "starting", "attempts": []},
        "command": {"shell": "vllm serve m", "problems": []},
        "settings": {"source": None, "demo": False, "overrides": []}, "plan": "", "doctor": [],
        "log": {"excerpt": [], "note": "no log"}, "environment": {"server_env": {}, "inherited": {}}}
