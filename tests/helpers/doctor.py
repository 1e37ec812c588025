"""Doctor's helpers: ``env`` (a fixture: an Env where everything is fine; registered in
tests/conftest.py), settings from the defaults, recorded-H200 monitors."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest

from backend.doctor import Check, Context, Env
from backend.gpu import GpuMonitor
from backend.server.launch import VllmInstall
from backend.settings import Settings, defaults
from tests.helpers.nvml_fake import FakeNvml, load_snapshot

GiB = 1 << 30
MiB = 1 << 20
LIBRARY_NOT_FOUND = 12


def settings(planner: dict | None = None, **server) -> Settings:
    v = defaults()
    v["server"].update(server)
    v["planner"].update(planner or {})
    return Settings(server=v["server"], console=v["console"], planner=v["planner"], chat=v["chat"])


def monitor(copies: int = 2, cc=(8, 6), name: str = "NVIDIA GeForce RTX 3090", total: int = 24 * GiB,
            used: int = 0, **kw) -> GpuMonitor:
    """A GpuMonitor over the recorded H200 snapshot, turned into `copies` cards of this kind."""
    snap = load_snapshot()
    g = snap["gpus"][0]
    g.update(name=name, cc=list(cc))
    g["mem_v1"] = {"total": total, "free": total - used, "used": used}
    g["mem_v2"] = {"total": total, "reserved": 0, "free": total - used, "used": used}
    return GpuMonitor(nvml=FakeNvml(snap, copies=copies, **kw))


def no_nvml() -> GpuMonitor:
    return GpuMonitor(nvml=FakeNvml(init_error=LIBRARY_NOT_FOUND))


def statvfs(total: int, free: int | None = None):
    free = total if free is None else free
    return lambda path: SimpleNamespace(f_frsize=4096, f_blocks=total // 4096, f_bavail=free // 4096)


@pytest.fixture
def env(tmp_path, monkeypatch):
    """An Env where everything is fine and nothing real is asked; tests change one fact."""
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # the ledger's own model lookup
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    return Env(monitor=monitor(), install=VllmInstall("vllm", "0.11.0", sys.executable),
               load_library=lambda name: object(), site_dirs=lambda s: [], statvfs=statvfs(16 * GiB, 500 * GiB),
               bind=lambda host, port: None, port_holders=lambda port: [],
               server_status=lambda: {"state": "stopped"}, processes=lambda s, m: [],
               servers=lambda s, m: [],
               environ={"HF_HOME": str(tmp_path / "hf")}, home=tmp_path / "home")


def run(fn, s: Settings, env: Env):
    ctx = Context(s, env)
    return fn(ctx)


def by_name(checks: list[Check]) -> dict[str, Check]:
    return {c.name: c for c in checks}
