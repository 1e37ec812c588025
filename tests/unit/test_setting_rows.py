"""backend.setting_rows: rows for the settings screen, TOML text, where saves go, and the save itself.
The `cfg` fixture (the repo's config.toml in an empty working directory) is tests/helpers/settings_screen.py's."""

from __future__ import annotations

import pytest

from backend import setting_rows as sr
from backend.settings import SCHEMA, ConfigError, load


@pytest.fixture
def fake_demo_model(tmp_path, monkeypatch):
    from backend import demo

    model = tmp_path / "demo-model"
    monkeypatch.setattr(demo, "ensure_model", lambda: model)
    return model


def rows_by_name(settings) -> dict[str, sr.Row]:
    return {r.dotted: r for r in sr.build_rows(settings)}


def test_rows_list_every_schema_key_in_section_order(cfg):
    rows = sr.build_rows(load(config=str(cfg)))
    assert [r.dotted for r in rows] == [f"{s}.{k}" for s, t in SCHEMA.items() for k in t]
    assert list(dict.fromkeys(r.section for r in rows)) == ["server", "console", "planner", "chat"]


def test_rows_say_value_default_source_and_modified(cfg):
    rows = rows_by_name(load(config=str(cfg)))
    mml = rows["server.max_model_len"]
    assert (mml.value, mml.value_text, mml.source, mml.modified) == (8192, "8192", "file", True)
    assert mml.default_text.startswith("(unset")
    port = rows["server.port"]
    assert (port.source, port.modified) == ("file", False)  # written, but equal to the default
    eager = rows["server.enforce_eager"]  # commented out in the file
    assert (eager.source, eager.in_file, eager.value_text, eager.edit_text) == ("default", False, "(unset)", "")
    assert rows["console.on_exit"].choices_text == '"ask" | "keep" | "stop"'
    assert rows["server.dtype"].edit_text == '"bfloat16"'
    assert sr.type_text(rows["console.health_interval_s"].spec) == "integer or number"


def test_set_overrides_are_marked_and_never_offered_for_saving(cfg):
    settings = load(config=str(cfg), overrides=["server.max_model_len=2048", "server.env.FOO=1"])
    rows = rows_by_name(settings)
    mml = rows["server.max_model_len"]
    assert (mml.value, mml.source, mml.forced) == (2048, "--set", True)
    assert mml.edit_text == "8192", "the editor starts from the file's value, not the override"
    assert rows["server.env"].source == "--set"
    assert rows["server.port"].source == "file"
    assert sr.overrides_text(settings) == ["--set for this run: server.max_model_len=2048, server.env.FOO=1"]


def test_demo_marks_its_values_and_offers_the_value_in_use(cfg, fake_demo_model):
    settings = load(config=str(cfg), demo=True)
    rows = rows_by_name(settings)
    assert all(rows[f"server.{k}"].source == "demo" for k in SCHEMA["server"])
    assert rows["planner.device"].source == "demo" and rows["chat.max_tokens"].source == "demo"
    assert not any(r.forced for r in rows.values()), "in --demo a save goes to the demo settings file"
    gmu = rows["server.gpu_memory_utilization"]
    assert (gmu.value, gmu.edit_text) == (0.2, "0.2"), "the editor shows the value in use, not the file's 0.9"
    assert sr.config_target(settings) == sr.demo_model.settings_path()
    [line] = sr.overrides_text(settings)
    assert "--demo replaces all of [server] and chat.max_tokens, planner.device" in line
    assert "demo settings file" in line


def test_a_demo_edit_goes_to_the_demo_settings_file_and_the_next_demo_load_reads_it(cfg, fake_demo_model):
    before = cfg.read_text()
    settings = load(config=str(cfg), demo=True)
    saved = sr.apply_edit(settings, "server", "max_num_seqs", "5")
    demo_file = sr.demo_model.settings_path()
    assert saved.path == demo_file and "demo settings file" in saved.note
    assert saved.restart and "this run keeps" not in saved.note
    assert cfg.read_text() == before, "the user's config file is not the demo's"
    assert saved.settings.server["max_num_seqs"] == 5 and saved.settings.demo
    again = load(config=str(cfg), demo=True)
    assert again.server["max_num_seqs"] == 5
    assert rows_by_name(again)["server.max_num_seqs"].source_text == "from the demo settings file"
    assert load(config=str(cfg)).server["max_num_seqs"] != 5, "runs without --demo do not read it"


def test_a_bad_demo_settings_file_is_named(cfg, fake_demo_model):
    path = sr.demo_model.settings_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("[server]\nmax_num_seqs = \"many\"\n")
    with pytest.raises(ConfigError, match="demo-settings.toml"):
        load(config=str(cfg), demo=True)


@pytest.mark.parametrize("value", [4096, 0.9, True, "auto", ["a", "b"], {"A": "1"}, [], {}, 'say "hi"\n'])
def test_toml_text_is_what_parse_text_reads_back(value):
    key = {int: ("server", "max_model_len"), float: ("server", "gpu_memory_utilization"),
           bool: ("server", "enforce_eager"), str: ("chat", "system_prompt"),
           list: ("server", "extra_args"), dict: ("server", "env")}[type(value)]
    assert sr.parse_text(*key, sr.toml_text(value)).value == value


def test_parse_text_is_the_set_syntax_and_validates():
    assert sr.parse_text("console", "on_exit", "keep").value == "keep"  # bare word: a string
    assert sr.parse_text("console", "vllm_python", '""').value == ""
    assert sr.parse_text("console", "health_interval_s", "2").value == 2
    with pytest.raises(ConfigError, match="must be an integer"):
        sr.parse_text("server", "max_model_len", "abc")
    with pytest.raises(ConfigError, match="not one of"):
        sr.parse_text("console", "on_exit", '"never"')
    with pytest.raises(ConfigError, match="must be in"):
        sr.parse_text("server", "gpu_memory_utilization", "1.5")
    with pytest.raises(ConfigError, match="not a TOML value"):
        sr.parse_text("server", "extra_args", '["--foo"')
    with pytest.raises(ConfigError, match="not a TOML value"):
        sr.parse_text("chat", "system_prompt", '"unterminated')


def test_empty_text_removes_the_key_and_empties_a_table():
    assert sr.parse_text("server", "max_model_len", "  ").unset
    env = sr.parse_text("server", "env", "")
    assert (env.unset, env.value) == (False, {})


def test_which_changes_need_a_restart():
    assert sr.needs_restart("server", "max_model_len") and sr.needs_restart("server", "env")
    assert sr.needs_restart("console", "stop_timeout") and sr.needs_restart("console", "vllm_python")
    assert not sr.needs_restart("console", "theme") and not sr.needs_restart("chat", "max_tokens")
    assert sr.effect("console", "log_max_lines") == "when the console starts again"
    assert sr.effect("server", "port") == "on the next server start or restart"


def test_target_is_the_file_read_else_the_xdg_config(cfg, tmp_path, qhome, monkeypatch):
    assert sr.config_target(load(config=str(cfg))) == cfg
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.chdir(empty)
    settings = load()
    assert settings.source is None
    assert sr.config_target(settings) == qhome / "config" / "config.toml"


def test_apply_edit_saves_keeps_comments_and_reloads(cfg):
    before = cfg.read_text()
    settings = load(config=str(cfg), overrides=["console.on_exit=keep"])
    saved = sr.apply_edit(settings, "server", "max_model_len", "4096")
    assert cfg.read_text() == before.replace("max_model_len = 8192", "max_model_len = 4096", 1)
    assert saved.settings.server["max_model_len"] == 4096
    assert saved.settings.console["on_exit"] == "keep", "the reload keeps this run's --set"
    assert saved.restart and saved.path == cfg and saved.text == "4096"
    assert "used on the next server start or restart" in saved.note
    assert sr.offer_restart(saved, "ready") and sr.offer_restart(saved, "backoff")
    assert not sr.offer_restart(saved, "stopped") and not sr.offer_restart(saved, None)


def test_apply_edit_refuses_a_bad_value_and_writes_nothing(cfg):
    before = cfg.read_bytes()
    with pytest.raises(ConfigError, match="must be an integer"):
        sr.apply_edit(load(config=str(cfg)), "server", "max_model_len", "abc")
    assert cfg.read_bytes() == before
    assert [p.name for p in cfg.parent.iterdir()] == ["config.toml"], "no temp file left behind"


def test_apply_edit_refuses_to_rewrite_a_broken_file(cfg):
    settings = load(config=str(cfg))
    cfg.write_text(cfg.read_text() + "\n[oops\n")
    before = cfg.read_bytes()
    with pytest.raises(ConfigError, match="not valid TOML"):
        sr.apply_edit(settings, "server", "max_model_len", "4096")
    assert cfg.read_bytes() == before


def test_empty_text_removes_the_key_from_the_file(cfg):
    saved = sr.apply_edit(load(config=str(cfg)), "server", "max_model_len", "")
    text = cfg.read_text()
    assert "max_model_len = " not in text.split("[profiles.")[0]  # the profiles keep theirs
    assert "# Longest prompt + reply in tokens." in text
    assert saved.settings.server["max_model_len"] is None and saved.text == ""
    assert f"server.max_model_len removed from {cfg}; now unset: vLLM's own default" in saved.note


def test_removing_a_key_the_demo_file_does_not_hold_says_nothing_was_removed(cfg, fake_demo_model):
    # the demo's first removal said "removed (default applies), saved to" a file it never wrote,
    # while the demo's own 0.2 went on applying
    settings = load(config=str(cfg), demo=True)
    saved = sr.apply_edit(settings, "server", "gpu_memory_utilization", "")
    demo_file = sr.demo_model.settings_path()
    assert not demo_file.exists()
    assert saved.note == (f"server.gpu_memory_utilization is not in {demo_file} (the demo settings file): "
                          "nothing removed; it stays 0.2")
    assert not saved.restart, "nothing changed: no restart to offer"
    saved = sr.apply_edit(saved.settings, "server", "gpu_memory_utilization", "0.3")
    saved = sr.apply_edit(saved.settings, "server", "gpu_memory_utilization", "")
    assert saved.note.startswith(f"server.gpu_memory_utilization removed from {demo_file} (the demo settings "
                                 "file); now 0.2; used on the next server start"), saved.note
    assert saved.restart and saved.settings.server["gpu_memory_utilization"] == 0.2


def test_a_new_key_and_an_env_table_keep_the_comments(cfg):
    before = cfg.read_text()
    settings = load(config=str(cfg))
    sr.apply_edit(settings, "server", "enforce_eager", "true")
    saved = sr.apply_edit(settings, "server", "env", '{NCCL_P2P_DISABLE = "1"}')
    text = cfg.read_text()
    for line in before.splitlines():
        if line.startswith("#"):
            assert line in text, f"comment lost: {line}"
    assert saved.settings.server["env"] == {"NCCL_P2P_DISABLE": "1"}
    assert saved.settings.server["enforce_eager"] is True
    saved = sr.apply_edit(saved.settings, "server", "env", "")
    assert saved.settings.server["env"] == {} and "# CUDA_VISIBLE_DEVICES" in cfg.read_text()


def test_a_forced_key_is_saved_but_this_run_keeps_the_override(cfg):
    settings = load(config=str(cfg), overrides=["server.max_model_len=2048"])
    saved = sr.apply_edit(settings, "server", "max_model_len", "4096")
    assert "max_model_len = 4096" in cfg.read_text()
    assert saved.settings.server["max_model_len"] == 2048
    assert "this run keeps 2048 (server.max_model_len=2048)" in saved.note
    assert not saved.restart, "a restart would not use the saved value: no offer"


def test_first_save_without_a_file_creates_the_xdg_config(tmp_path, qhome, monkeypatch):
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.chdir(empty)
    saved = sr.apply_edit(load(), "server", "port", "8001")
    target = qhome / "config" / "config.toml"
    assert saved.path == target and target.read_text().strip() == "[server]\nport = 8001"
    assert saved.settings.server["port"] == 8001 and saved.settings.source == target
    assert sr.reload(saved.settings).server["port"] == 8001


def test_rows_read_back_what_was_saved(cfg):
    saved = sr.apply_edit(load(config=str(cfg)), "console", "on_exit", '"keep"')
    row = rows_by_name(saved.settings)["console.on_exit"]
    assert (row.value, row.source, row.modified) == ("keep", "file", True)
    assert not saved.restart and "used now" in saved.note


def test_file_data_is_empty_for_a_missing_file(tmp_path):
    assert sr.file_data(tmp_path / "nope.toml") == {}
