"""The console's start imports only what its first frame needs (issue 16: first frame <= 0.5 s;
benchmarks/bench_startup.py). Each module named here was moved out of the start on purpose: if one
comes back (an import at a module's top), its test fails and says which."""

import json
import os
import subprocess
import sys

import pytest

from tests.helpers import ROOT

# loaded on first use or after the first frame, never before the console runs
DEFERRED = [
    "backend.cli.commands",  # the subcommands: the console's argv is parsed without them
    "backend.cli.chat_cmd",
    "backend.cluster",  # with the subcommands: cluster.ops, the router's httpx
    "httpx",  # the chat, the metrics reader and the cluster's router: once used
    "backend.pull",  # the pull check runs after the first frame, its import in a thread
    "backend.ledger",  # the plan: after the first frame, in a thread
    "backend.server.launch",
    "importlib.metadata",  # the ledger's (the vllm version)
    "backend.logparse",  # the log's parser: once there is a log to parse
    "backend.metrics",  # once a server is READY
    "prometheus_client",
    "backend.setting_rows",
    "backend.server.orphans",
    "backend.bench.loadtest",
    "backend.doctor",
    "backend.report",
    "tui.screens.settings",
    "tui.screens.pull",
    "tui.screens.cluster",
    "tui.screens.profiles",
    "tui.screens.quit",  # with q
    "tui.screens.events",  # with j (--watch's keys are in tui/console_app.py)
    "tui.screens.dialog",  # the dialogs' frame: with the first dialog
    "pynvml",  # NVML opens in a thread after the first frame (GpuMonitor(start=False))
    "backend.gpu_facts",  # what NVML says: made once NVML is open (issue 28)
    "psutil",  # the state file's pid checks: once there is a pid to check
    "secrets",  # the API key's generator (hashlib, OpenSSL with it)
    "hashlib",  # the state file's argv_hash: the supervisor's (issue 28)
    "tui.widgets.chat_pane",  # the chat pane: mounted when the chat is first shown (issue 28)
    "backend.chat.session",
    "backend.chat.store",  # the chat pane's content: built when the chat is first shown
    "tui.widgets.transcript",
    "tui.widgets.reply",
    "tui.widgets.chat_input",
    "backend.clipboard",
    "backend.host",  # the host panel's psutil: imported in its sampler's thread
    "backend.history",  # the history view (h) and the recorder's SQLite: on first use
    "backend.recorder",
    "sqlite3",
    "tui.screens.history",
]

# the console's start up to App.run(), in a fresh interpreter: its modules at that moment
_AT_RUN = """
import json, os, sys
import tui.app
def run(self, *args, **kwargs):
    print(json.dumps(sorted(sys.modules)), flush=True)
    os._exit(0)
tui.app.QwenApp.run = run
from tui.entry import main
main(["--demo", "--set", "server.port=8097"])
"""


@pytest.fixture(scope="module")
def modules_at_run(tmp_path_factory) -> set[str]:
    env = dict(os.environ, QWEN_TUI_HOME=str(tmp_path_factory.mktemp("home")), PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-c", _AT_RUN], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0 and r.stdout.strip(), r.stderr[-2000:]
    return set(json.loads(r.stdout.strip().splitlines()[-1]))


def test_the_console_gets_as_far_as_running(modules_at_run: set[str]) -> None:
    assert {"tui.app", "tui.screens.main", "textual.app", "backend.server.client"} <= modules_at_run


@pytest.mark.parametrize("module", DEFERRED)
def test_not_imported_before_the_console_runs(modules_at_run: set[str], module: str) -> None:
    loaded = sorted(m for m in modules_at_run if m == module or m.startswith(module + "."))
    assert loaded == [], f"{module} is imported before the console's first frame again: {loaded}"


# the same start, with every @dataclass made on the way named: their generated methods cost ~1 ms
# a class (issue 28), so the start's own types are @record (backend/record.py)
_DATACLASSES_AT_RUN = """
import dataclasses, json, os, sys
made = []
real = dataclasses._process_class
def process(cls, *args, **kwargs):
    made.append(f"{cls.__module__}.{cls.__qualname__}")
    return real(cls, *args, **kwargs)
dataclasses._process_class = process
import tui.app
def run(self, *args, **kwargs):
    print(json.dumps(made), flush=True)
    os._exit(0)
tui.app.QwenApp.run = run
from tui.entry import main
main(["--demo", "--set", "server.port=8097"])
"""


def test_no_dataclass_of_ours_is_made_before_the_console_runs(tmp_path) -> None:
    env = dict(os.environ, QWEN_TUI_HOME=str(tmp_path / "home"), PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-c", _DATACLASSES_AT_RUN], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip(), r.stderr[-2000:]
    ours = [name for name in json.loads(r.stdout.strip().splitlines()[-1]) if name.startswith(("backend.", "tui."))]
    assert ours == [], f"made with @dataclass before the first frame (make them @record): {ours}"


def test_console_args_are_the_full_parsers() -> None:
    """The console's argv, parsed without the subcommands, gives what the full parser gives;
    anything else (a subcommand, help, a bad option) is left to the full parser."""
    from backend.cli import build_parser, console_args

    for argv in ([], ["--demo"], ["--demo", "--set", "server.port=8097"], ["--dem"], ["--set=a.b=1"],
                 ["--set", "a.b=1", "--set", "c.d=2", "--config", "x.toml", "--profile", "chat"]):
        args = console_args(argv)
        assert args is not None, argv
        assert vars(args) == vars(build_parser().parse_args(argv)), argv
    for argv in (["status"], ["--demo", "status", "--json"], ["-h"], ["--help"], ["--set"], ["--bogus"],
                 ["--demo", "extra"]):
        assert console_args(argv) is None, argv


def test_first_poll_without_a_log_leaves_the_parser_unloaded(tmp_path) -> None:
    """No log yet (a first start, a fresh state dir): the poll says what an empty parser says,
    without importing it (nor psutil: no pid to check); EMPTY_SNAPSHOT must stay LogParser().snapshot()."""
    code = ("import json, sys; from backend.server.client import ServerClient; p = ServerClient().poll(); "
            "print(json.dumps([p.parsed, p.timeline, 'backend.logparse' in sys.modules, 'psutil' in sys.modules]))")
    env = dict(os.environ, QWEN_TUI_HOME=str(tmp_path / "home"), PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr[-2000:]
    parsed, timeline, parser_loaded, psutil_loaded = json.loads(r.stdout)
    assert parser_loaded is False
    assert psutil_loaded is False  # no state file: no pid to check

    from backend.logparse import LogParser
    from backend.server.client import EMPTY_SNAPSHOT

    empty = LogParser()
    assert EMPTY_SNAPSHOT == empty.snapshot()
    assert timeline == empty.phase_durations() == []
    assert parsed == dict(EMPTY_SNAPSHOT, phase="stopped", failure=None)
