"""How long the last start of the same settings took to READY, so a start can say what to expect.

One small JSON file in the state dir: {argv_hash: {"ready_s": seconds, "at": unix time, "phases":
{phase: seconds}}}. Written by the supervisor when a launch becomes ready; read by `status`
(`expected_ready_s`) and the hang watchdog (backend/server/watchdog.py: each phase's usual length). A missing
or broken file only means no expectation."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from backend import paths

KEEP = 50  # the most recent argv hashes kept


def history_path() -> Path:
    return paths.state_dir() / "startups.json"


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def record(key: str, ready_s: float, path: Path | None = None, phases: dict[str, float] | None = None) -> None:
    """Remember that this launch (its argv hash) took `ready_s` seconds, `phases` each; never raises."""
    path = path or history_path()
    try:
        data = _read(path)
        data[key] = {"ready_s": round(float(ready_s), 1), "at": time.time()}
        if phases:
            data[key]["phases"] = {k: round(float(v), 2) for k, v in phases.items()}
        newest = sorted(data.items(), key=lambda kv: kv[1].get("at", 0) if isinstance(kv[1], dict) else 0)
        data = dict(newest[-KEEP:])
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=1), encoding="utf-8")
        os.replace(tmp, path)
    except (OSError, TypeError, ValueError):
        pass


def expected(key: str | None, path: Path | None = None) -> float | None:
    """Seconds the previous start of these settings took to READY, or None."""
    if not key:
        return None
    entry = _read(path or history_path()).get(key)
    try:
        return float(entry["ready_s"]) if isinstance(entry, dict) else None
    except (KeyError, TypeError, ValueError):
        return None


def expected_phases(key: str | None, path: Path | None = None) -> dict[str, float]:
    """Seconds each start phase took in the previous start of these settings ({} when unknown)."""
    entry = _read(path or history_path()).get(key) if key else None
    phases = entry.get("phases") if isinstance(entry, dict) else None
    if not isinstance(phases, dict):
        return {}
    return {str(k): float(v) for k, v in phases.items() if isinstance(v, (int, float))}
