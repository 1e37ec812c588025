"""`qwen-tui report` (issue 19): every kind of secret planted in a log, in the settings and in the environment
is gone from the report, `--no-redact` keeps them, and a failed demo-like start (a state file and a log written
by hand, as test_cli_attempts.py does) gives a report with the diagnosis, its fix and the lines around the error,
not the whole log."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys

from backend.redact import Redactor, model_label
from backend.report import log_excerpt
from backend.server import statefile
from tests.helpers import FIXTURES, ROOT

HOME = "/home/alicexyz"
KEY = "s3cr3t-Key-9f8e7d"
HF = "hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345"
SK = "sk-proj-Zx81Qw72Er63Ty54Ui45Op36"
BEARER = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
HEX = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
B64 = "QWxhZGRpbjpvcGVuIHNlc2FtZQ0KQWxhZGRpbjpvcGVu"
IP4, IP6 = "10.23.45.67", "fe80::1ff:fe23:4567:890a"
MODEL = f"{HOME}/models/Qwen2.5-14B-Instruct"

# The planted lines are ERROR lines: the report quotes the first error's block, so they are all in it.
PLANTED = f"""qwen-tui: launch at Tue Dec  1 07:00:38 2026 (unix 1764572438.0) pid 2270 argv: vllm serve {MODEL} --api-key ***
(APIServer pid=2270) INFO 12-01 07:00:38 [api_server.py:1] vLLM API server version 0.20.2
(APIServer pid=2270) ERROR 12-01 07:00:38 [utils.py:1] non-default args: {{'model': '{MODEL}', 'api_key': '{KEY}'}}
(APIServer pid=2270) ERROR 12-01 07:00:39 [utils.py:2] login {HF}, client {SK}, WANDB_API_KEY=plainvalue123 on alicexyz@{{host}}
(APIServer pid=2270) ERROR 12-01 07:00:39 [utils.py:3] Authorization: Bearer {BEARER}
(APIServer pid=2270) ERROR 12-01 07:00:39 [utils.py:4] NCCL INFO Bootstrap : Using eth0:{IP4}<0> and {IP6}
(APIServer pid=2270) ERROR 12-01 07:00:39 [utils.py:5] cache {HOME}/.cache/vllm sha {HEX} blob {B64}
(APIServer pid=2270) ERROR 12-01 07:00:39 [utils.py:6] other user /home/bob/x, bound to 127.0.0.1 and 0.0.0.0
(EngineCore pid=2340) ERROR 12-01 07:01:22 [core.py:1136] EngineCore failed to start.
(EngineCore pid=2340) ERROR 12-01 07:01:22 [core.py:1136] Traceback (most recent call last):
(EngineCore pid=2340) ERROR 12-01 07:01:22 [core.py:1136]   File "{HOME}/venv/lib/python3.12/site-packages/vllm/v1/engine/core.py", line 1110, in run_engine_core
(EngineCore pid=2340) ERROR 12-01 07:01:22 [core.py:1136]     raise ValueError(
(EngineCore pid=2340) ERROR 12-01 07:01:22 [core.py:1136] ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine.
"""


def _redactor(host: str = "gpubox-7") -> Redactor:
    return Redactor(home=HOME, user="alicexyz", hosts={f"{host}.lab.example.org", host}, secrets=[KEY], model=MODEL)


SECRETS = (HOME, "alicexyz", "plainvalue123", "/home/bob", KEY, HF, SK, BEARER, HEX, B64, IP4, IP6, MODEL, "gpubox-7", "lab.example.org")


def test_each_kind_of_secret_is_replaced_by_what_it_was():
    red = _redactor()
    out = red(PLANTED.replace("{host}", "gpubox-7.lab.example.org") + "\nssh gpubox-7\n")
    for s in SECRETS:
        assert s not in out, s
    for label in ("<model-dir>/Qwen2.5-14B-Instruct", "<secret>", "<hf-token>", "Bearer <token>", "<hex>", "<ip>",
                  "<host>", "<user>", "~/.cache/vllm", "/home/<user>/x"):
        assert label in out, label
    assert "'api_key': '<api-key>'" in out or "'api_key': '<secret>'" in out
    assert red.counts["ip"] == 2 and red.counts["hex"] == 1


def test_what_a_triage_needs_is_kept():
    text = ("vLLM 0.20.2, driver 580.159.04, torch 2.11.0+cu130, at 07:01:22, c10::Error, bound to 127.0.0.1:8000, "
            "0.0.0.0 and [::]:8000 and ::1, model DeepSeek-R1-Distill-Qwen-32B-Instruct, repo Qwen/Qwen2.5-14B-Instruct, "
            "max_tokens = 512, NCCL_P2P_DISABLE=1, VLLM_ALLOW_LONG_MAX_MODEL_LEN=1, std::vector, 12-01 07:01:22")
    red = Redactor(home=HOME, user="alicexyz", hosts={"gpubox-7"}, secrets=[KEY], model="Qwen/Qwen2.5-14B-Instruct")
    assert red(text) == text
    assert red.summary() == "nothing needed redacting"


def test_model_path_keeps_only_what_names_the_model():
    assert model_label("Qwen/Qwen2.5-14B-Instruct") is None  # a repo id says nothing about the machine
    assert model_label("/data/models/Qwen2.5-14B/") == "<model-dir>/Qwen2.5-14B"
    snap = "/root/.cache/huggingface/hub/models--Qwen--Qwen2.5-14B-Instruct/snapshots/" + "a" * 40
    assert model_label(snap) == "Qwen/Qwen2.5-14B-Instruct"


def test_the_excerpt_is_the_error_its_traceback_and_the_figures_not_the_whole_log():
    path = FIXTURES / "vllm-logs" / "v0.20.2-h200-qwen2.5-14b-shape-tp1-util0.17-no-cache-memory-fail.log"
    ex = log_excerpt(str(path))
    text = "\n".join(t for _, t in ex["excerpt"])
    numbers = [n for n, _ in ex["excerpt"] if n]
    assert ex["lines_total"] == 156 and len(numbers) < 80
    assert "Model loading took 27.57 GiB" in text and "Available KV cache memory: -5.03 GiB" in text  # figures
    assert "EngineCore failed to start." in text and "ValueError: No available memory" in text  # the first error
    assert list(range(40, 64)) == [n for n in numbers if 40 <= n <= 64 and n != 64]  # its traceback, whole
    assert 80 not in numbers  # the same traceback printed again by the process wrapper is left out
    assert "RuntimeError: Engine core initialization failed" in text  # the last lines
    assert ex["parsed"]["failure"]["kind"] == "no_cache_memory"


def _cli(home, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, HOME=str(home), USER="alicexyz", LOGNAME="alicexyz", HF_TOKEN=HF)
    return subprocess.run([sys.executable, "-m", "backend.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env=env)


def _failed_demo_state(qhome, tmp_path):
    """A failed demo-like start: the state a supervisor leaves after a no_cache_memory failure, by hand."""
    fake_home = tmp_path / "alicexyz"
    (fake_home / "models" / "tiny").mkdir(parents=True)
    host = socket.gethostname()
    logs = statefile.logs_dir()
    logs.mkdir(parents=True)
    log = logs / "vllm-20261201-070038-77-0.log"
    log.write_text(PLANTED.replace(HOME, str(fake_home)).replace("{host}", host), encoding="utf-8")
    fail = {"attempt": 1, "kind": "no_cache_memory", "message": "ValueError: No available memory for the cache blocks.",
            "fix": "raise server.gpu_memory_utilization", "log_path": str(log), "exit_code": 1, "was_ready": False}
    statefile.write({"state": "failed", "supervisor_pid": 77, "attempt": 1, "log_path": str(log), "failure": fail,
                     "attempts": [fail], "last_failure": fail, "detail": "exit code 1: no_cache_memory",
                     "argv": ["vllm", "serve", str(fake_home / "models" / "tiny"), "--api-key", KEY]})
    overrides = ["--demo", "--set", f"server.model={fake_home / 'models' / 'tiny'}", "--set", f"server.api_key={KEY}",
                 "--set", f"server.env.HF_TOKEN={HF}", "--set", f"server.env.NCCL_SOCKET_IFNAME=eth0:{IP4}"]
    return fake_home, host, overrides


def test_report_of_a_failed_demo_start_has_no_home_host_or_key(qhome, tmp_path):
    fake_home, host, overrides = _failed_demo_state(qhome, tmp_path)
    r = _cli(fake_home, *overrides, "report")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    for s in (str(fake_home), KEY, HF, SK, BEARER, HEX, B64, IP4, IP6, "alicexyz", "/home/bob"):
        assert s not in out, s
    assert not re.search(rf"(?<![\w-]){re.escape(host)}(?![\w-])", out), host
    for want in ("## Versions", "## GPUs", "## Command line", "## Settings", "## Plan", "## Doctor",
                 "**no_cache_memory**", "Fix: raise server.gpu_memory_utilization", "## Log around the failure",
                 "ValueError: No available memory", "## Environment", "HF_TOKEN=<secret>",
                 "<model-dir>/tiny", "--api-key <api-key>", "Bearer <token>", "<hex>", "<ip>"):
        assert want in out, want
    r = _cli(fake_home, *overrides, "report", "--json", "--out", str(tmp_path / "r.json"))
    assert r.returncode == 0 and "redacted" in r.stderr
    data = json.loads((tmp_path / "r.json").read_text())
    blob = json.dumps(data)
    assert data["redacted"] is True and KEY not in blob and str(fake_home) not in blob and HF not in blob
    assert data["report"]["server"]["failure"]["kind"] == "no_cache_memory"


def test_no_redact_keeps_them(qhome, tmp_path):
    fake_home, host, overrides = _failed_demo_state(qhome, tmp_path)
    r = _cli(fake_home, *overrides, "report", "--no-redact")
    assert r.returncode == 0, r.stderr
    for s in (str(fake_home), KEY, HF, SK, IP4, host):
        assert s in r.stdout, s
    assert "**Not redacted**" in r.stdout
