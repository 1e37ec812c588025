"""backend/spawn.py: a run's Origin round-trips through the argv it writes, and no other module writes
a qwen-tui command line or re-encodes the run's options as argv."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from backend import spawn
from backend.cli import build_parser
from backend.cli.options import load_settings
from backend.server import statefile
from backend.spawn import Origin, PullJob, origin_of, origin_of_options

ROOT = Path(__file__).resolve().parents[2]
GLOBAL_FLAGS = {"--set", "--profile", "--config", "--demo"}


def parsed(origin: Origin, *command: str):
    return build_parser().parse_args([*origin.argv(), *(command or ("status",))])


@pytest.mark.parametrize("origin", [
    Origin(),
    Origin(demo=True),
    Origin(config="/etc/qwen tui/config.toml", profile="long"),
    Origin(demo=True, profile="batch", overrides=("server.port=8011", "server.env.A=b c", "chat.max_tokens=64")),
    Origin(overrides=("server.extra_args=[\"--enforce-eager\"]", "server.port=1", "server.port=2")),
])
def test_the_argv_parses_back_to_the_same_origin(origin):
    assert origin_of_options(parsed(origin)) == origin
    assert origin_of_options(parsed(origin, "serve", "--detach")) == origin


@settings(max_examples=60, deadline=None)
@given(demo=st.booleans(), profile=st.none() | st.from_regex(r"[a-z][a-z0-9_-]{0,8}", fullmatch=True),
       overrides=st.lists(st.tuples(st.sampled_from(["server", "chat", "console"]),
                                    st.from_regex(r"[a-z_]{1,12}", fullmatch=True),
                                    st.text(max_size=20)).map(lambda t: f"{t[0]}.{t[1]}={t[2]}"), max_size=4))
def test_any_origin_round_trips(demo, profile, overrides):
    origin = Origin(demo=demo, profile=profile, overrides=tuple(overrides))
    assert origin_of_options(parsed(origin)) == origin


def test_the_settings_it_loads_give_the_same_origin(tmp_path, qhome):
    cfg = tmp_path / "config.toml"
    cfg.write_text("[server]\nport = 8123\n", encoding="utf-8")
    origin = Origin(config=str(cfg), profile="long", overrides=("server.max_num_seqs=3",))
    settings = load_settings(parsed(origin))
    assert settings.server["port"] == 8123 and settings.server["max_num_seqs"] == 3
    assert origin_of(settings) == origin
    assert origin_of(origin.load()) == origin


def test_a_relative_config_is_made_absolute_for_a_child(tmp_path, qhome, monkeypatch):
    (tmp_path / "mine.toml").write_text("[server]\nport = 8124\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    args = build_parser().parse_args(["--config", "mine.toml", "status"])
    assert origin_of_options(args).config == str(tmp_path / "mine.toml")
    assert origin_of(load_settings(args)).config == str(tmp_path / "mine.toml")


def test_the_supervisor_line_keeps_a_set_key_out_of_argv():
    key = "sk-local-0123456789abcdef"
    child = spawn.supervisor(Origin(demo=True, overrides=(f"server.api_key='{key}'", "server.port=9")),
                             restart="never", allow_orphans=True)
    assert child.argv == [sys.executable, "-m", "backend.cli", "--demo", "--set", "server.port=9", "serve",
                          "--quiet", "--allow-orphans", "--restart", "never"]
    assert child.env == {"QWEN_TUI_API_KEY": key} and statefile.is_supervisor_argv(child.argv)
    assert spawn.systemd_serve(Origin(overrides=(f"server.api_key={key}",)))[1] is True


def test_a_restore_puts_the_old_server_settings_after_the_runs_own():
    old = {"max_model_len": 8192, "api_key": "<hidden>", "quantization": None, "env": {"OMP_NUM_THREADS": "2"},
           "served_model_name": ["a", "b"]}
    origin = spawn.restoring(Origin(overrides=("server.max_model_len=32768",)), old)
    assert origin.overrides == ("server.max_model_len=32768", "server.max_model_len=8192",
                                "server.env.OMP_NUM_THREADS=2", 'server.served_model_name=["a", "b"]')


def test_a_pull_job_is_its_own_command_line():
    argv = spawn.pull(Origin(demo=True), PullJob("Qwen/Q", source="hf", workers=2, local_dir="/m d",
                                                 set_model=True, watch_parent=77))
    args = build_parser().parse_args(argv[3:])
    assert (args.repo_id, args.source, args.workers, args.local_dir, args.set_model, args.watch_parent, args.demo) \
        == ("Qwen/Q", "hf", 2, "/m d", True, 77, True)
    assert spawn.is_cli_argv(argv) == argv[3:] and not statefile.is_supervisor_argv(argv)


def test_the_profile_switch_is_a_new_origin_not_an_edited_argv():
    origin = Origin(demo=True, profile="long", overrides=("a.b=1",))
    assert origin.with_profile("chat").argv() == ["--demo", "--profile", "chat", "--set", "a.b=1"]
    assert origin.with_profile(None) == Origin(demo=True, overrides=("a.b=1",))


# -- nothing else writes such a line -------------------------------------------------------------
def argv_builders(source: str) -> list[int]:
    """Lines of `source` that build a qwen-tui command line or re-encode global options as argv: a list
    or tuple display holding "backend.cli", or a list display holding a global option's flag."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, (ast.List, ast.Tuple)):
            continue
        words = {e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
        if spawn.MODULE in words or (isinstance(node, ast.List) and words & GLOBAL_FLAGS):
            out.append(node.lineno)
    return out


def test_the_detector_finds_what_the_old_code_did():
    assert argv_builders('argv = [sys.executable, "-m", "backend.cli", *opts, "serve"]') == [1]
    assert argv_builders('BASE = (sys.executable, "-m", "backend.cli")') == [1]
    assert argv_builders('out += ["--set", f"server.{k}={v}"]') == [1]
    assert argv_builders('ok = "backend.cli" in line; pairs = (("--config", a),)') == []


def test_only_spawn_builds_qwen_tui_command_lines():
    found = []
    for path in sorted([*(ROOT / "backend").rglob("*.py"), *(ROOT / "tui").rglob("*.py")]):
        if path == ROOT / "backend" / "spawn.py":
            continue
        found += [f"{path.relative_to(ROOT)}:{line}" for line in argv_builders(path.read_text(encoding="utf-8"))]
    assert found == [], "a child command line is written outside backend/spawn.py: " + ", ".join(found)
