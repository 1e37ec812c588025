"""Issue 26's journal: append-only JSON lines per state dir, rotated; who, from where, what, how it ended."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

from backend import events
from backend.server.launch import Launch, VllmInstall
from backend.server.supervisor import Supervisor
from backend.setting_rows import Edit, save_edit
from backend.settings import load
from tests.helpers.supervisor import STAND_IN, until


def test_an_event_says_who_from_where_what_and_how_it_ended(qhome, monkeypatch):
    monkeypatch.setenv("SSH_CLIENT", "10.1.2.3 50522 22")
    e = events.record_event("restart", "restarted: ready", diff={"server.max_model_len": [8192, 16384]})
    [got] = events.read_events()
    assert got == json.loads(json.dumps(e)) and got["user"] and got["ssh_client"] == "10.1.2.3"
    assert events.describe(got, now=got["time"] + 725) == \
        f"restarted by {got['user']} 12 min ago: max_model_len 8192 → 16384"


def test_the_journal_rotates_and_reads_across_the_rotation(qhome, monkeypatch):
    monkeypatch.setattr(events, "ROTATE_BYTES", 2000)
    for i in range(40):
        events.record_event("stop", f"stop {i}")
    assert events.journal_path().with_name("events.jsonl.1").exists()
    assert events.journal_path().stat().st_size <= 2000
    assert [e["outcome"] for e in events.read_events(3)] == ["stop 37", "stop 38", "stop 39"]


def test_a_line_that_is_not_json_is_skipped_and_a_write_never_raises(qhome, tmp_path):
    events.record_event("start", "launched")
    with open(events.journal_path(), "a") as f:
        f.write("not json\n[1, 2]\n")
    assert [e["action"] for e in events.read_events()] == ["start"]
    assert events.record_event("start", state_dir=tmp_path / "file" / "x") is not None
    (tmp_path / "ro").write_text("")
    assert events.record_event("start", state_dir=tmp_path / "ro" / "sub") is None  # a file in the way


def test_events_cli_json_and_text(qhome):
    events.record_event("kill", "stopped in 0.1 s", kill_pid=4242)
    r = subprocess.run([sys.executable, "-m", "backend.cli", "events", "--json", "-n", "5"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0 and json.loads(r.stdout)[-1]["kill_pid"] == 4242
    r = subprocess.run([sys.executable, "-m", "backend.cli", "events"], capture_output=True, text=True, timeout=60)
    assert "kill" in r.stdout and "stopped in 0.1 s" in r.stdout


def test_a_saved_setting_is_journalled_with_its_diff(qhome, tmp_path):
    cfg = tmp_path / "config.toml"
    cfg.write_text("[server]\nmax_model_len = 8192\n")
    save_edit(cfg, Edit("server", "max_model_len", 16384, False))
    [e] = events.read_events()
    assert e["action"] == "settings" and e["diff"] == {"server.max_model_len": [8192, 16384]}


def test_a_key_set_or_removed_says_unset_and_removing_a_missing_key_journals_nothing(qhome, tmp_path):
    # the journal (j) read "gpu_memory_utilization None → None" for a removal that changed nothing
    cfg = tmp_path / "config.toml"
    cfg.write_text("[server]\n")
    save_edit(cfg, Edit("server", "gpu_memory_utilization", None, True))
    assert events.read_events() == []
    save_edit(cfg, Edit("server", "gpu_memory_utilization", 0.3, False))
    save_edit(cfg, Edit("server", "gpu_memory_utilization", None, True))
    assert [events.diff_text(e["diff"]) for e in events.read_events()] == [
        "gpu_memory_utilization (unset) → 0.3", "gpu_memory_utilization 0.3 → (unset)"]


async def test_the_supervisor_journals_the_launch_and_the_stop(qhome):
    settings = load(None, overrides=["console.stop_timeout=5", "server.port=1"])
    launch = Launch([sys.executable, "-c", STAND_IN], {}, VllmInstall(None, None, sys.executable), [])
    sup = Supervisor(settings, launch, restart="never")
    run = asyncio.create_task(sup.run())
    await until(lambda: sup.state == "starting")
    sup.request_stop()
    assert await asyncio.wait_for(run, 30) == 0
    got = [(e["action"], e["outcome"]) for e in events.read_events()]
    assert got[0] == ("start", f"launched pid {sup.proc.pid}") and got[-1][0] == "stopped"
    assert got[-1][1].startswith("stopped in")


def test_watch_reads_another_owners_state_file_only_when_asked(qhome, monkeypatch):
    from backend.server import statefile

    statefile.write({"state": "stopped"})
    real = statefile.os.geteuid()
    monkeypatch.setattr(statefile.os, "geteuid", lambda: real + 1)  # as if another user wrote it
    assert "not by you" in statefile.file_problem(statefile.state_path())
    monkeypatch.setitem(statefile.READ_ONLY, "others", True)
    assert statefile.file_problem(statefile.state_path()) is None
