"""The state file's one typed record (backend/server/statefile.py ServerRecord): the reader's type table is
derived from it, a write holds only its keys, and no backend module writes state-file keys by hand."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from backend.server import statefile
from backend.server.statefile import FIELDS, ServerRecord

ROOT = Path(__file__).resolve().parents[2]


def test_the_readers_types_come_from_the_record():
    assert set(FIELDS) == set(ServerRecord().to_dict())
    assert FIELDS["started_at"] == (int, float) and FIELDS["pid"] == (int,) and FIELDS["sleep_enabled"] == (bool,)
    assert FIELDS["argv"] == (list,) and FIELDS["settings"] == (dict,)


def test_a_record_is_written_whole_and_a_mapping_as_given(qhome):
    statefile.write(ServerRecord(state="stopped", detail="done", restarts=0))
    data = json.loads(statefile.state_path().read_text())
    assert set(data) == set(FIELDS) and data["state"] == "stopped" and data["pid"] is None
    assert isinstance(data["updated_at"], float) and statefile.type_problem(data) is None
    statefile.write({"state": "stopped"})  # an older supervisor's file: the keys it lacks stay absent
    assert set(json.loads(statefile.state_path().read_text())) == {"state", "updated_at"}


def test_a_key_the_record_does_not_have_is_refused_and_nothing_is_written(qhome):
    statefile.write(ServerRecord(state="stopped"))
    before = statefile.state_path().read_text()
    with pytest.raises(ValueError, match="not state-file keys: sate"):
        statefile.write({"sate": "ready"})
    assert statefile.state_path().read_text() == before


def test_the_console_stopping_an_orphan_keeps_the_rest_of_the_record():
    last = {"state": "ready", "pid": 4001, "pgid": 4001, "port": 8011, "supervisor_pid": 4000}
    out = statefile.stopped_by_console(last, "stopped it", {"summary": "freed"})
    assert out == {"state": "stopped", "detail": "stopped it", "stop_report": "stopped it", "pid": None,
                   "pgid": None, "port": 8011, "supervisor_pid": 4000, "gpu_release": {"summary": "freed"}}


def hand_written_state(source: str) -> list[int]:
    """Lines that call statefile.write with a dict built on the spot (a dict display or dict(...))."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "write" \
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "statefile" and node.args:
            arg = node.args[0]
            if isinstance(arg, ast.Dict) or (isinstance(arg, ast.Call) and getattr(arg.func, "id", "") == "dict"):
                out.append(node.lineno)
    return out


def test_the_detector_finds_the_old_hand_written_record():
    assert hand_written_state('statefile.write(dict(last, state="stopped", pid=None))') == [1]
    assert hand_written_state('statefile.write({"state": "x"})') == [1]
    assert hand_written_state("statefile.write(self.record(), path)") == []


def test_no_backend_module_writes_state_file_keys_by_hand():
    found = [f"{p.relative_to(ROOT)}:{n}" for p in sorted((ROOT / "backend").rglob("*.py"))
             for n in hand_written_state(p.read_text(encoding="utf-8"))]
    assert found == [], "state-file keys written outside backend/server/statefile.py's record: " + ", ".join(found)
