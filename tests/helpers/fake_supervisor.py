"""A process that looks like our supervisor to the process table but only sleeps."""

from __future__ import annotations

import os
import sys
import time

FAKE_SUPERVISOR = "import time\nwhile True:\n    time.sleep(1)\n"


def start_fake_supervisor(tmp_path, home=None, **popen_kw):
    """A process whose command line is a supervisor's (`python -m backend.cli serve --quiet`) but
    that only sleeps: a package `backend.cli` of its own, first on its path. ``home``: its
    QWEN_TUI_HOME (another state dir). Returns (proc, write): `write(path=None, **state)` writes a
    state file naming it (pid, start time, command line)."""
    import subprocess

    import psutil

    from backend.server import statefile

    pkg = tmp_path / f"fake-supervisor-{len(list(tmp_path.glob('fake-supervisor-*')))}"
    (pkg / "backend" / "cli").mkdir(parents=True)
    (pkg / "backend" / "__init__.py").write_text("")
    (pkg / "backend" / "cli" / "__init__.py").write_text("")
    (pkg / "backend" / "cli" / "__main__.py").write_text(FAKE_SUPERVISOR)
    env = dict(os.environ, PYTHONPATH=str(pkg))
    if home is not None:
        env["QWEN_TUI_HOME"] = str(home)
    proc = subprocess.Popen([sys.executable, "-m", "backend.cli", "serve", "--quiet"], cwd=pkg, env=env,
                            **popen_kw)
    deadline = time.time() + 10
    while "serve" not in psutil.Process(proc.pid).cmdline() and time.time() < deadline:
        time.sleep(0.02)
    me = psutil.Process(proc.pid)

    def write(path=None, **state):
        data = {"state": "ready", "supervisor_pid": proc.pid, "supervisor_create_time": me.create_time(),
                "supervisor_cmdline": " ".join(me.cmdline()), **state}
        statefile.write(data, path)
        return data

    write.proc = proc
    return proc, write
