"""Small python process trees that title themselves like vLLM (``spawn`` is a fixture, registered in
tests/conftest.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest

# One node of a fake vLLM tree. argv: [*extra, spec_json, marker, pidfile]. It sets its title the way
# vLLM's setproctitle shows up in /proc (comm), records "role pid" once titled, starts its children
# (same code, read back from /proc/self/cmdline) in its process group, then sleeps, or exits at once
# leaving its children re-parented.
CODE = r"""
import json, os, signal, subprocess, sys, time
spec, marker, pidfile = json.loads(sys.argv[-3]), sys.argv[-2], sys.argv[-1]
if spec.get("title"):
    with open("/proc/self/comm", "w") as f:
        f.write(spec["title"])
if spec.get("ignore_term"):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
code = open("/proc/self/cmdline", "rb").read().split(b"\0")[2].decode()
for child in spec.get("children", []):
    argv = [child.get("argv0", sys.executable), "-c", code, *child.get("args", []), json.dumps(child), marker, pidfile]
    subprocess.Popen(argv, executable=sys.executable, start_new_session=child.get("new_session", False))
with open(pidfile, "a") as f:
    f.write(f"{spec['role']} {os.getpid()}\n")
if spec.get("exit"):
    os._exit(0)
while True:
    time.sleep(1)
"""


@dataclass
class Tree:
    popen: subprocess.Popen
    marker: str
    pidfile: Path
    pids: dict[str, int] = field(default_factory=dict)

    @property
    def pgid(self) -> int:
        return self.popen.pid  # start_new_session: the root leads its own group


def _count(spec: dict) -> int:
    return 1 + sum(_count(c) for c in spec.get("children", []))


@pytest.fixture
def spawn(tmp_path: Path, vllm_lock):
    """spawn(spec) -> Tree, started in a new session; everything it started is SIGKILLed afterwards."""
    trees: list[Tree] = []

    def _spawn(spec: dict, args: list[str] | None = None) -> Tree:
        marker = f"qwen-tui-test-{uuid.uuid4().hex}"
        pidfile = tmp_path / f"{marker}.pids"
        pidfile.touch()
        argv = [sys.executable, "-c", CODE, *(args or spec.get("args", [])), json.dumps(spec), marker, str(pidfile)]
        tree = Tree(subprocess.Popen(argv, start_new_session=True), marker, pidfile)
        trees.append(tree)
        want = _count(spec)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            lines = pidfile.read_text().split("\n")
            tree.pids = {role: int(pid) for role, pid in (ln.split() for ln in lines if ln.strip())}
            if len(tree.pids) >= want:
                return tree
            time.sleep(0.02)
        raise AssertionError(f"tree did not start: {tree.pids}")

    yield _spawn

    leaked = []
    for tree in trees:
        ours = [p for p in psutil.process_iter(["cmdline"]) if tree.marker in " ".join(p.info["cmdline"] or [])]
        leaked += [p.pid for p in ours if p.status() != psutil.STATUS_ZOMBIE]
        for p in ours:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        try:
            os.killpg(tree.pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        tree.popen.kill()
        tree.popen.wait(timeout=10)
    psutil.wait_procs([p for p in psutil.process_iter() if p.pid in leaked], timeout=5)
    # Tests that stop their tree must leave nothing behind; tests that do not are cleaned above.


VLLM_LIKE = {
    "role": "api",
    "args": ["vllm", "serve", "Qwen/Qwen2.5-14B-Instruct"],
    "children": [
        {"role": "engine", "title": "VLLM::EngineCore", "children": [
            {"role": "tp0", "title": "VLLM::Worker_TP0"},
            {"role": "tp1", "argv0": "VLLM::Worker_TP1"},  # title in the cmdline only (setproctitle style)
        ]},
        {"role": "helper"},  # e.g. the resource tracker: not a VLLM:: title
    ],
}


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
