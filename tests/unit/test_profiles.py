"""Workload profiles: the overlay and its precedence, bad tables, the CLI, the settings rows."""

from __future__ import annotations

import json

import pytest

from backend.cli import main
from backend.profiles import BUILTIN, verdicts
from backend.settings import ConfigError, load


def test_a_profile_overlays_only_its_keys_and_set_still_wins(cfg):
    plain = load(config=str(cfg))
    assert plain.profile is None and plain.server["max_model_len"] == 8192
    assert set(plain.profiles) >= {"chat", "long", "batch"}
    long = load(config=str(cfg), profile="long")
    assert long.server["max_model_len"] == 32768 and long.server["max_num_seqs"] == 2
    assert long.server["tensor_parallel_size"] == plain.server["tensor_parallel_size"] == 2
    both = load(config=str(cfg), profile="long", overrides=["server.max_num_seqs=4"])
    assert both.server["max_num_seqs"] == 4 and both.server["max_model_len"] == 32768
    assert load(config=str(cfg), profile="batch").snapshot()["profile"] == "batch"


def test_the_file_adds_and_replaces_profiles(cfg):
    cfg.write_text(cfg.read_text() + '\n[profiles.agent]\nmax_model_len = 16384\nmax_num_seqs = 4\n'
                   '\n[profiles.long]\nmax_model_len = 24576\n', encoding="utf-8")
    with pytest.raises(ConfigError):  # the repo's file already has [profiles.long]: TOML refuses a second
        load(config=str(cfg))
    text = cfg.read_text().rsplit("[profiles.long]\nmax_model_len = 24576", 1)[0]
    cfg.write_text(text, encoding="utf-8")
    s = load(config=str(cfg), profile="agent")
    assert s.server["max_model_len"] == 16384 and "agent" in s.profiles and "chat" in s.profiles


def test_no_file_still_has_the_built_in_profiles(qhome, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    s = load(profile="chat")
    assert s.source is None and s.server["max_model_len"] == 8192 and s.server["max_num_seqs"] == 8
    assert BUILTIN["batch"]["max_model_len"] == 4096


@pytest.mark.parametrize("table, says", [
    ('[profiles.x]\nmax_model_len = "big"\n', "profiles.x: server.max_model_len must be an integer"),
    ('[profiles.x]\nno_such_flag = 1\n', "unknown setting server.no_such_flag"),
    ('[profiles.x]\ndescription = 3\n', "description must be a string"),
    ('[profiles]\nx = 3\n', "must be a table like [profiles.x]"),
])
def test_bad_profile_tables_say_file_line_and_key(qhome, tmp_path, table, says):
    path = tmp_path / "c.toml"
    path.write_text('[server]\nport = 8001\n\n' + table, encoding="utf-8")
    with pytest.raises(ConfigError) as e:
        load(config=str(path))
    assert says in str(e.value) and f"{path}:4" in str(e.value)


def test_unknown_profile_is_exit_2(cfg, capsys):
    assert main(["--profile", "nope", "plan"]) == 2
    err = capsys.readouterr().err
    assert "unknown profile 'nope'" in err and "chat, long, batch" in err and "Traceback" not in err


def test_plan_and_profiles_commands(cfg):
    from tests.helpers.e2e import cli

    r = cli("--config", str(cfg), "--profile", "long", "plan", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["max_model_len"] == 32768
    r = cli("--config", str(cfg), "plan", "--json", "--profile", "batch")  # after the subcommand too
    assert json.loads(r.stdout)["max_num_seqs"] == 32
    r = cli("--config", str(cfg), "--profile", "chat", "profiles", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["active"] == "chat"
    by = {v["name"]: v for v in out["profiles"]}
    assert by["chat"]["active"] and by["long"]["max_model_len"] == 32768 and by["long"]["fits"]
    assert by["batch"]["max_concurrency"] > by["long"]["max_concurrency"]
    assert any(p["severity"] == "warning" for p in by["batch"]["problems"])  # 32 seqs of 4K: more than fit


def test_verdict_of_a_profile_that_does_not_fit(cfg):
    cfg.write_text(cfg.read_text() + '\n[profiles.huge]\nmax_model_len = 131072\n', encoding="utf-8")
    v = {x.name: x for x in verdicts(load(config=str(cfg)))}["huge"]
    assert v.fits is False and any(p["severity"] == "error" and p["fix"] for p in v.problems)


def test_the_origin_carries_the_profile():
    from backend.cli import build_parser
    from backend.spawn import Origin, origin_of_options

    origin = Origin(demo=True, profile="long", overrides=("a.b=1",))
    assert origin.with_profile("chat").argv() == ["--demo", "--profile", "chat", "--set", "a.b=1"]
    assert origin.with_profile(None).argv() == ["--demo", "--set", "a.b=1"]
    assert "--profile" in origin_of_options(build_parser().parse_args(["--profile", "batch", "status"])).argv()


def test_settings_rows_say_what_the_profile_sets_and_a_save_keeps_it(cfg):
    from backend import setting_rows as sr

    s = load(config=str(cfg), profile="long")
    rows = {r.dotted: r for r in sr.build_rows(s)}
    row = rows["server.max_model_len"]
    assert row.source == "profile" and row.forced and row.value == 32768
    assert row.source_text == "this run: profile long" and row.edit_text == "8192"  # the file's value
    assert rows["server.port"].source == "file"
    assert any("profile long sets max_model_len, max_num_seqs" in line for line in sr.overrides_text(s))
    saved = sr.apply_edit(s, "server", "max_model_len", "4096")
    assert saved.settings.server["max_model_len"] == 32768 and saved.settings.profile == "long"
    assert "this run keeps 32768 (profile long)" in saved.note and not saved.restart
    assert load(config=str(cfg)).server["max_model_len"] == 4096
