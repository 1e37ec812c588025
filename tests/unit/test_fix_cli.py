"""`qwen-tui fix` and `status --json`'s "fix": the failure from the state, the diff, --yes saving and
starting again (the supervisor's start stubbed), exit codes."""

from __future__ import annotations

import json

import pytest

from backend.cli import main
from backend.server import client as supervisor_client
from backend.server.status import ServerState, ServerStatus

KV = {"kind": "kv_cache_too_small", "fix": "lower server.max_model_len",
      "message": "ValueError: To serve at least one request with the models's max seq len (32768), (0.38 GiB KV "
                 "cache) is needed, which is larger than the available KV cache memory (0.27 GiB). Based on the "
                 "available memory, the estimated maximum model length is 23648."}
CONFIG = '[server]\nmodel = "Qwen/Qwen2.5-0.5B-Instruct"\nmax_model_len = 32768  # mine\n'


@pytest.fixture
def failed(qhome, tmp_path, monkeypatch):
    cfg = tmp_path / "config.toml"
    cfg.write_text(CONFIG)
    state = {"st": ServerStatus(ServerState.FAILED, failure=KV)}
    monkeypatch.setattr(supervisor_client, "status", lambda: state["st"])
    starts: list = []  # the Origins started

    def start(origin, **kw):
        starts.append(origin)
        state["st"] = ServerStatus(ServerState.READY, supervised=True, supervisor_pid=1)
        return {"supervisor_pid": 1, "log_path": "x.log"}

    monkeypatch.setattr(supervisor_client, "start_detached", start)
    return cfg, starts


def test_fix_shows_the_diff_and_writes_nothing_without_yes(failed, capsys):
    cfg, starts = failed
    assert main(["--config", str(cfg), "fix"]) == 0
    out = capsys.readouterr().out
    assert "server.max_model_len: 32768 -> 23648" in out and "the ledger says it fits" in out
    assert "qwen-tui fix --yes" in out and cfg.read_text() == CONFIG and starts == []


def test_fix_yes_saves_starts_and_waits_for_ready(failed, capsys):
    cfg, starts = failed
    assert main(["--config", str(cfg), "fix", "--yes", "--wait", "30", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["applied"] and out["saved_to"] == str(cfg) and out["status"]["state"] == "ready"
    assert out["fix"]["changes"][0]["value"] == 23648
    assert "max_model_len = 23648  # mine" in cfg.read_text()
    assert [o.argv() for o in starts] == [["--config", str(cfg.resolve())]]
    from backend import events

    (ev,) = [e for e in events.read_events() if e["action"] == "fix"]
    assert ev["diff"] == {"server.max_model_len": [32768, 23648]} and ev["kind"] == "kv_cache_too_small"


def test_a_fix_from_set_is_refused_with_exit_1(failed, capsys):
    cfg, starts = failed
    assert main(["--config", str(cfg), "--set", "server.max_model_len=32768", "fix", "--yes", "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert not out["applied"] and "--set server.max_model_len=23648" in out["fix"]["blocked"]
    assert cfg.read_text() == CONFIG and starts == []


def test_nothing_failed_is_nothing_to_fix(failed, monkeypatch, capsys):
    cfg, _ = failed
    monkeypatch.setattr(supervisor_client, "status", lambda: ServerStatus(ServerState.READY, supervised=True))
    assert main(["--config", str(cfg), "fix", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["message"] == "nothing to fix: the server is ready"
    assert main(["fix", "--wait", "5"]) == 2


def test_status_json_carries_the_fix(failed, capsys):
    cfg, _ = failed
    assert main(["--config", str(cfg), "status", "--json"]) == 1  # failed: as before
    st = json.loads(capsys.readouterr().out)
    assert st["failure"]["kind"] == "kv_cache_too_small"
    assert st["fix"]["diff"] == ["server.max_model_len: 32768 -> 23648"] and st["fix"]["verdict"]["fits"] is True
    assert main(["--config", str(cfg), "status"]) == 1
    assert "apply it: qwen-tui fix --yes" in capsys.readouterr().out
