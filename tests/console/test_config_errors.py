"""Every input validated, with file:line (issue 17, cases 5, 6, 8): non-UTF-8 files, read-only
files, numeric ranges, an empty model and bad environment names are config errors (exit 2), never a
traceback, never a silently replaced file."""

from __future__ import annotations

import os
import stat

import pytest

from backend import settings as S
from backend.cli import main
from backend.setting_rows import apply_edit
from tests.helpers.console import wait_until
from tests.helpers.settings_screen import make, message
from tui.screens.settings import SettingsScreen


def test_a_non_utf8_byte_in_a_comment_names_file_line_and_column(tmp_path, qhome, capsys):
    bad = tmp_path / "c.toml"
    bad.write_bytes(b"[server]\nport = 8001\n# caf\xe9\n")
    with pytest.raises(S.ConfigError) as e:
        S.load(config=str(bad))
    assert f"{bad}:3:6: not UTF-8 (byte 0xe9)" in str(e.value)
    for cmd in (["print-command"], ["plan"], ["serve"]):
        assert main(["--config", str(bad), *cmd]) == 2
    assert f"{bad}:3:6" in capsys.readouterr().err


def test_broken_toml_is_file_line_column(tmp_path, qhome):
    bad = tmp_path / "c.toml"
    bad.write_text("[server]\nport = \n")
    with pytest.raises(S.ConfigError, match=rf"{bad}:2:\d+: not valid TOML"):
        S.load(config=str(bad))


async def test_e_on_a_file_that_went_bad_says_so_and_keeps_running(cfg):  # noqa: F811
    app, _ = make(cfg)
    async with app.run_test(size=(150, 45)) as pilot:
        cfg.write_bytes(cfg.read_bytes() + b"\n# \xff\n")  # goes bad while the console runs
        await pilot.press("e")
        assert await wait_until(pilot, lambda: isinstance(app.screen, SettingsScreen))
        assert await wait_until(pilot, lambda: "not UTF-8" in message(app))
        assert f"{cfg}:" in message(app)


def test_a_read_only_config_is_refused_never_replaced(cfg, qhome):  # noqa: F811
    before = cfg.read_bytes()
    os.chmod(cfg, 0o444)
    settings = S.load(config=str(cfg))
    with pytest.raises(S.ConfigError, match=r"read-only \(mode 0444\): not saved"):
        apply_edit(settings, "server", "port", "8123")
    with pytest.raises(S.ConfigError, match="read-only"):
        S.remove_setting(cfg, "server", "port")
    assert cfg.read_bytes() == before and stat.S_IMODE(cfg.stat().st_mode) == 0o444


@pytest.mark.parametrize("override, words", [
    ("server.model=", ["server.model may not be empty"]),
    ('server.model=""', ["server.model may not be empty"]),
    ("console.stop_timeout=-1", ["console.stop_timeout = -1", "0 to 3600"]),
    ("console.health_interval_s=0", ["console.health_interval_s = 0", "0.05 to 3600"]),
    ("console.restart_max_failures=-3", ["console.restart_max_failures = -3", "1 to 1000"]),
    ("console.log_max_lines=-1", ["console.log_max_lines = -1"]),
    ("chat.temperature=9", ["chat.temperature = 9"]),
    ("server.env.=1", ["'' is not a valid environment variable name"]),
    ("server.env.1X=1", ["'1X' is not a valid environment variable name"]),
    ("server.env.A-B=1", ["is not a valid environment variable name"]),
    ('server.env={"BAD NAME" = "1"}', ["server.env.BAD NAME is not a valid"]),
    ("server.port=0", ["server.port = 0"]),
    ("server.served_model_name=[]", ["served_model_name must be a non-empty"]),
])
def test_wrong_values_are_refused_naming_the_key(qhome, capsys, override, words):
    with pytest.raises(S.ConfigError) as e:
        S.load(overrides=[override])
    for w in words:
        assert w in str(e.value)
    assert main(["--set", override, "print-command"]) == 2
    assert "Traceback" not in capsys.readouterr().err


@pytest.mark.parametrize("body, line, words", [
    ('[server]\nport = 8001\nmodel = ""\n', 3, "server.model may not be empty"),
    ('[server]\n\n[console]\n# c\nstop_timeout = -1\n', 5, "console.stop_timeout = -1"),
    ('[server.env]\nOK = "1"\n"1BAD" = "2"\n', 1, "server.env.1BAD is not a valid"),
    ('[console]\nhealth_interval_s = "fast"\n', 2, "console.health_interval_s must be an integer or number"),
])
def test_errors_in_a_file_name_file_and_line(tmp_path, qhome, body, line, words):
    path = tmp_path / "c.toml"
    path.write_text(body)
    with pytest.raises(S.ConfigError) as e:
        S.load(config=str(path))
    assert str(e.value).startswith(f"{path}:{line}: ") and words in str(e.value)


def test_every_numeric_setting_has_a_range():
    for section, table in S.SCHEMA.items():
        for key, spec in table.items():
            types = spec.type if isinstance(spec.type, tuple) else (spec.type,)
            if int in types or float in types:
                assert spec.range is not None, f"{section}.{key} has no range"


def test_a_config_that_holds_a_key_is_written_user_only(cfg, qhome):  # noqa: F811
    os.chmod(cfg, 0o644)
    S.save_setting(cfg, "server", "api_key", "sk-local-test")
    assert stat.S_IMODE(cfg.stat().st_mode) == 0o600
