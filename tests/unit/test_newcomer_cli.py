"""Issue 28 points 6 and 7: the states and messages a kill gives, and the CLI inputs a shell can give
(stdin, empty, zero, negative, a directory, control bytes) each with a clear message and exit 2."""

from __future__ import annotations

import asyncio
import json
import os
import stat
import subprocess
import sys

import pytest

from backend.server.launch import Launch, VllmInstall
from backend.server.supervisor import Supervisor, exit_text
from backend.settings import load
from tests.helpers import ROOT
from tests.helpers.fault_server import FaultServer
from tests.helpers.supervisor import GroupOnGpu


def cli(*args: str, stdin: str = "", env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "backend.cli", *args], cwd=ROOT, input=stdin, text=True,
                          capture_output=True, timeout=60, env=env or dict(os.environ, PYTHONPATH=str(ROOT)))


# -- point 6: a kill -9 ------------------------------------------------------------------------------
def test_exit_text_names_the_signal():
    assert exit_text(-9) == "killed by signal 9 (SIGKILL)"
    assert exit_text(-15) == "killed by signal 15 (SIGTERM)"
    assert exit_text(3) == "exited with code 3"


async def test_a_kill_9_is_said_as_such_and_failed_never_comes_before_backoff(qhome, monkeypatch):
    import backend.server.supervisor as sv

    monkeypatch.setattr(sv, "BACKOFF_START_S", 0.05)
    settings = load(None, overrides=["console.stop_timeout=5", "server.port=1", "console.restart_max_failures=2",
                                     "console.restart_window_s=600"])
    killed = ("import os, signal; print('INFO 11-29 10:00:00 [api_server.py:1] vLLM API server version 0.11.0', "
              "flush=True); os.kill(os.getpid(), signal.SIGKILL)")
    launch = Launch([sys.executable, "-c", killed], {}, VllmInstall(None, None, sys.executable), [])
    sup = Supervisor(settings, launch, restart="on-failure")
    sup.gpus = GroupOnGpu(sup)
    states: list[tuple[str, str]] = []
    sup.on_state = lambda t: states.append((t.state, t.detail))
    assert await asyncio.wait_for(sup.run(), 30) == 1
    first_backoff = next(i for i, (s, _) in enumerate(states) if s == "backoff")
    assert "failed" not in [s for s, _ in states[:first_backoff]], states
    assert [s for s, _ in states].count("failed") == 1 and states[-1][0] == "failed"
    rec = sup.attempts[0]
    assert rec["exit_code"] == -9 and rec["message"].startswith("vLLM was killed by signal 9 (SIGKILL)"), rec
    assert "exited with code -9" not in json.dumps(sup.attempts)


def test_serve_wait_and_status_say_a_failure_as_a_sentence_not_a_dict():
    from backend.cli.commands import _failure_text

    f = {"kind": "unknown", "message": "vLLM was killed by signal 9 (SIGKILL)", "fix": "see dmesg"}
    assert _failure_text(f) == "vLLM was killed by signal 9 (SIGKILL)\n  fix: see dmesg"
    assert _failure_text(dict(f, kind="oom_loading", message="CUDA out of memory")).startswith(
        "oom_loading: CUDA out of memory")


def test_the_detached_supervisors_lines_are_stamped(capsys):
    from backend.cli import commands

    commands._STAMPED["on"] = True
    try:
        commands._err("a refusal")
    finally:
        commands._STAMPED["on"] = False
    err = capsys.readouterr().err
    assert err[:4].isdigit() and err[10] == " " and err.endswith("qwen-tui: a refusal\n"), err


# -- point 7: the CLI's inputs ---------------------------------------------------------------------
def test_serve_json_prints_json_when_refused(qhome):
    r = cli("--set", "console.vllm_python=/nonexistent/python", "serve", "--detach", "--json")
    assert r.returncode == 2, r.stderr
    out = json.loads(r.stdout)
    assert out["started"] is False and out["refused"] and out["exit_code"] == 2
    assert any("vLLM is not installed" in e for e in out["errors"])


@pytest.mark.parametrize("value", ["0", "-1", "many"])
def test_chat_max_tokens_below_one_is_refused_before_anything_is_sent(qhome, value):
    r = cli("chat", "--max-tokens", value, "hello")
    assert r.returncode == 2 and "--max-tokens" in r.stderr and "Traceback" not in r.stderr
    assert ("1 or more" if value != "many" else "not a whole number") in r.stderr


def test_chat_with_an_empty_conversation_name_is_refused(qhome):
    r = cli("chat", "--conversation", "", "hello")
    assert r.returncode == 2 and "--conversation needs a name" in r.stderr


def test_chat_dash_reads_stdin_and_text_mode_drops_control_bytes(qhome):
    with FaultServer() as srv:
        srv.httpd.reply = ["a\x1b[31mb", "\x00c\x07d\r\n"]
        port = srv.base_url.rsplit(":", 1)[1]
        piped = "a piped prompt " * 500
        r = cli("--set", f"server.port={port}", "--set", "server.served_model_name=m", "chat", "-", stdin=piped)
    assert r.returncode == 0, r.stderr
    sent = [m["content"] for m in srv.bodies[-1]["messages"] if m["role"] == "user"]
    assert sent == [piped], "the piped text, not a literal '-'"
    assert r.stdout == "a[31mbcd\n" and "\x1b" not in r.stdout and "\x00" not in r.stdout


def test_a_config_path_that_is_a_directory_says_so(qhome, tmp_path):
    r = cli("--config", str(tmp_path), "print-command")
    assert r.returncode == 2 and "is a directory" in r.stderr and "does not exist" not in r.stderr


def test_the_unknown_section_message_lists_every_section(qhome, tmp_path):
    cfg = tmp_path / "config.toml"
    cfg.write_text("[sever]\nport = 1\n")
    r = cli("--config", str(cfg), "print-command")
    assert r.returncode == 2
    for section in ("server", "console", "planner", "chat", "profiles", "cluster"):
        assert section in r.stderr.split("known:")[1], r.stderr


def test_an_export_is_private_as_the_conversations_are(qhome, tmp_path):
    from backend.chat.conversation import Conversation
    from backend.chat.store import Store, exports_dir, write_export

    store = Store()
    conv = store.create(Conversation(title="t"))
    out = tmp_path / "c.md"
    r = cli("chat", "--export", conv.id, "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    r = cli("chat", "--export", conv.id, "--out", str(tmp_path))
    assert r.returncode == 2 and "is a directory" in r.stderr
    write_export(exports_dir() / "x.md", "# x\n")  # the console's x
    assert stat.S_IMODE((exports_dir() / "x.md").stat().st_mode) == 0o600
    assert stat.S_IMODE(exports_dir().stat().st_mode) == 0o700


@pytest.mark.parametrize("argv, says", [
    (["--config", "", "print-command"], "--config needs a value"),
    (["--profile", "", "print-command"], "--profile needs a value"),
    (["chat", "--model", "", "hi"], "--model needs a name"),
    (["chat", "--export", ""], "--export needs a name"),
    (["chat", "--delete", ""], "--delete needs a name"),
    (["chat", "--rename", "", "new title"], "--rename needs a name"),
    (["logs", "--attempt", "0"], "1 or more"),
    (["logs", "--attempt", "-1"], "1 or more"),
    (["stop", "--orphans", "--pid", "0"], "1 or more"),
    (["stop", "--orphans", "--pid", "-1"], "1 or more"),
])
def test_empty_zero_and_negative_values_are_refused_with_exit_2(qhome, argv, says):
    r = cli(*argv)
    assert r.returncode == 2 and says in r.stderr and "Traceback" not in r.stderr, (r.returncode, r.stderr)


# -- status with settings named on the line ----------------------------------------------------------
def test_status_checks_the_settings_it_is_given_and_names_the_file(qhome, tmp_path):
    bad = cli("--config", str(tmp_path / "missing.toml"), "status")
    assert bad.returncode == 2 and "does not exist" in bad.stderr and "Traceback" not in bad.stderr
    bad = cli("--set", "server.bogus=1", "status")
    assert bad.returncode == 2 and "unknown setting server.bogus" in bad.stderr
    cfg = tmp_path / "mine.toml"
    cfg.write_text("[server]\nport = 8123\n")
    ok = cli("--config", str(cfg), "status")
    assert ok.returncode == 0, ok.stderr
    assert f"config: {cfg} (server.port 8123)" in ok.stdout.splitlines()
    plain = cli("status")  # nothing named: status reads no file and says nothing of one
    assert plain.returncode == 0 and "config:" not in plain.stdout
