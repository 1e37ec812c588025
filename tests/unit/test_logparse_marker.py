"""The launch marker (the supervisor's first line in each server log) and the parse-log --json report: the
timeline counts from the launch, and the JSON carries everything the text summary prints."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

from backend.logparse import LogParser, format_summary, launch_marker, parse_marker
from backend.logparse.cli import run_parse_log
from backend.server.launch import Launch, VllmInstall
from backend.server.supervisor import Supervisor
from backend.settings import load
from tests.helpers import FIXTURES

FIXTURES = FIXTURES / "vllm-logs"
READY = "v0.20.2-h200-qwen2.5-14b-shape-tp1-util0.90-ready.log"
# 16 s before vLLM's first line (06:56:20), as on the H200 run (the supervisor said ready after 125.4 s)
MARKER = ("qwen-tui: launch at 2026-12-01 06:56:04.600 (unix 1764572164.600) pid 1037 argv: "
          "/venv/bin/vllm serve /models/Qwen2.5-14B-Instruct --port 8000 --gpu-memory-utilization 0.9 "
          "--max-model-len 8192 --api-key '***'")


def body(name: str) -> list[str]:
    lines = (FIXTURES / name).read_text(encoding="utf-8").splitlines()
    return [ln for ln in lines if not ln.startswith("#")]


def parse(lines: list[str]) -> LogParser:
    p = LogParser()
    for ln in lines:
        p.feed(ln)
    p.end_of_log()
    return p


def test_marker_round_trip_hides_secrets():
    line = launch_marker(1764572164.6, 1037, ["/venv/bin/vllm", "serve", "/m/q", "--api-key", "sk-123",
                                              "--hf-token=hf_abc", "--port", "8000"])
    assert line.startswith("qwen-tui: launch at ") and line.endswith("\n") and line.count("\n") == 1
    assert "sk-123" not in line and "hf_abc" not in line
    launch = parse_marker(line)
    assert launch is not None and launch.unix == 1764572164.6 and launch.pid == 1037
    assert launch.argv == ["/venv/bin/vllm", "serve", "/m/q", "--api-key", "***", "--hf-token=***", "--port", "8000"]
    assert parse_marker("qwen-tui: launch at tomorrow") is None


def test_timeline_counts_from_the_launch_marker():
    without = parse(body(READY))
    assert "+1m 49s  ready" in format_summary(without)  # from vLLM's first line: 16 s short
    p = parse([MARKER, *body(READY)])
    r = p.report()
    ready = [m for m in r["timeline"] if m["phase"] == "ready"][0]
    assert ready["at_s"] == 124.4  # the uvicorn line carries no stamp: the last one seen (06:58:09)
    assert r["timeline"][0] == {"phase": "starting", "at_s": 0.0, "seconds": 65.4}  # to "Starting to load model"
    assert r["launched_at"] == 1764572164.6
    text = format_summary(p)
    assert "Timeline (from the launch)" in text and "+2m 04s  ready" in text
    assert p.info["port"] == 8000 and p.info["gpu_memory_utilization"] == 0.9
    assert p.info["server_python"] == "/venv/bin/python"
    assert p.bad_lines == 0 and p.snapshot()["failure"] is None


def test_marker_with_the_callers_clock():
    p = LogParser()
    p.feed(MARKER, t=1000.0)
    p.feed("INFO 12-01 06:57:10 [gpu_model_runner.py:1] Starting to load model /m/q...", t=1016.0)
    assert [(m.phase, m.t) for m in p.timeline] == [("starting", 1000.0), ("loading_weights", 1016.0)]


def test_json_carries_what_the_text_shows(tmp_path):
    log = tmp_path / "vllm.log"
    log.write_text("\n".join([MARKER, *body(READY)]) + "\n", encoding="utf-8")
    out, err = io.StringIO(), io.StringIO()
    assert run_parse_log(str(log), True, out=out, err=err) == 0
    d = json.loads(out.getvalue())
    assert d["compile_seconds"] == 37.43 and d["cuda_graph_gib"] == 0.1 and d["cuda_graph_count"] == 12
    assert d["cuda_graph_seconds"] == 2.0 and d["cuda_graph_estimate_gib"] == 0.09
    assert d["model"] == "/models/Qwen2.5-14B-Instruct" and d["max_model_len"] == 8192
    assert [m["phase"] for m in d["timeline"]] == ["starting", "loading_weights", "profiling", "kv_cache",
                                                  "cuda_graphs", "ready"]
    assert d["timeline"][-1]["at_s"] == 124.4 and d["launched_at"] == 1764572164.6
    assert d["per_rank"] == {} and d["failure_permanent"] is None
    out = io.StringIO()
    run_parse_log(str(log), False, out=out, err=err)
    text = out.getvalue()
    assert "torch.compile  37 s" in text and "12 graphs, captured in 2.0 s, 0.1 GiB" in text


def test_json_of_a_failed_log_says_the_failure_is_permanent():
    out = io.StringIO()
    run_parse_log(str(FIXTURES / "v0.20.2-h200-qwen2.5-14b-shape-tp1-util0.17-no-cache-memory-fail.log"), True,
                  out=out, err=io.StringIO())
    d = json.loads(out.getvalue())
    assert d["failure"]["kind"] == "no_cache_memory" and d["failure_permanent"] is True
    assert d["kv_cache_gib"] == -5.03


def test_a_stop_by_sigterm_is_not_an_engine_death():
    """vLLM 0.2x on SIGTERM: the engine goes first, the API server logs EngineDeadError, then shuts down."""
    p = parse([*body(READY),
               "(EngineCore pid=1159) INFO 12-01 07:10:00 [core.py:1454] [shutdown] EngineCore: trigger received "
               "signal=SIGTERM",
               "(APIServer pid=1037) ERROR 12-01 07:10:00 [async_llm.py:906] AsyncLLM output_handler failed.",
               "(APIServer pid=1037) ERROR 12-01 07:10:00 [async_llm.py:906] vllm.v1.engine.exceptions.EngineDeadError: "
               "EngineCore encountered an issue. See stack trace (above) for the root cause.",
               "INFO:     Shutting down",
               "INFO:     Application shutdown complete."])
    assert p.phase == "stopped" and p.snapshot()["failure"] is None


async def test_the_supervisor_writes_the_marker_first(qhome):
    settings = load(None, demo=False, overrides=["console.stop_timeout=5", "server.port=1"])
    script = "print('INFO 11-29 10:00:00 [api_server.py:1] vLLM API server version 0.11.0', flush=True)"
    argv = [sys.executable, "-c", script, "--api-key", "secret-1"]
    sup = Supervisor(settings, Launch(argv, {}, VllmInstall(None, None, sys.executable), []), restart="never")
    await sup.run()
    lines = Path(sup.log_path).read_text(encoding="utf-8").splitlines()
    launch = parse_marker(lines[0])
    assert launch is not None and launch.pid == sup.proc.pid and launch.argv[-1] == "***"
    assert abs(launch.unix - sup.started_at) < 0.01
    assert "vLLM API server version 0.11.0" in lines[1] and "secret-1" not in lines[0]
