"""The API key (issue 17): from a 0600 file, $QWEN_TUI_API_KEY or the config; only in the child's
environment as VLLM_API_KEY, never in argv, output, the state file or the settings screen."""

from __future__ import annotations

import json
import stat
import sys

import pytest

from backend import apikey
from backend import settings as S
from backend.cli import main
from backend.server import client as supervisor_client
from backend.server.launch import Launch, VllmInstall, build_launch
from backend.server.supervisor import Supervisor
from backend.setting_rows import apply_edit, build_rows

KEY = "sk-qwen-tui-test-0123456789"


@pytest.fixture
def keyfile(tmp_path):
    path = tmp_path / "api_key"
    path.write_text(KEY + "\n")
    path.chmod(0o600)
    return path


def test_gen_key_writes_a_0600_file_and_never_overwrites(qhome, tmp_path, capsys):
    path = tmp_path / "k"
    assert main(["gen-key", "--file", str(path)]) == 0
    out = capsys.readouterr().out
    key = path.read_text().strip()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and len(key) >= 40
    assert key not in out and f'api_key_file = "{path}"' in out
    assert main(["gen-key", "--file", str(path)]) == 2 and path.read_text().strip() == key
    assert main(["gen-key", "--file", str(path), "--force"]) == 0 and path.read_text().strip() != key


def test_the_key_goes_by_environment_never_argv(qhome, keyfile):
    s = S.load(overrides=[f"server.api_key_file={keyfile}"])
    launch = build_launch(s, VllmInstall("vllm", "0.11.0", sys.executable))
    assert KEY not in " ".join(launch.argv) and "--api-key" not in launch.argv
    assert "--api-key-file" not in launch.argv
    assert launch.full_env()["VLLM_API_KEY"] == KEY and "VLLM_API_KEY" not in launch.env
    assert "VLLM_API_KEY=<hidden>" in launch.shell_line() and KEY not in launch.shell_line()
    assert KEY in launch.shell_line(show_secrets=True)


@pytest.mark.parametrize("how", ["file", "env", "config"])
def test_print_command_hides_the_key_unless_asked(qhome, keyfile, tmp_path, monkeypatch, capsys, how):
    args = []
    if how == "file":
        args = ["--set", f"server.api_key_file={keyfile}"]
    elif how == "env":
        monkeypatch.setenv("QWEN_TUI_API_KEY", KEY)
    else:
        cfg = tmp_path / "c.toml"
        cfg.write_text(f'[server]\napi_key = "{KEY}"\n')
        cfg.chmod(0o600)
        args = ["--config", str(cfg)]
    for extra in ([], ["--json"]):
        assert main([*args, "print-command", *extra]) == 0
        out = capsys.readouterr().out
        assert KEY not in out and "VLLM_API_KEY=<hidden>" in out
    assert main([*args, "print-command", "--show-secrets"]) == 0
    assert f"VLLM_API_KEY={KEY}" in capsys.readouterr().out


def test_the_state_file_never_holds_the_key(qhome, tmp_path):
    s = S.load(overrides=[f"server.api_key={KEY}"])
    launch = build_launch(s, VllmInstall("vllm", "0.11.0", sys.executable))
    sup = Supervisor(s, launch)
    sup._write_state()
    text = sup.state_path.read_text()
    assert KEY not in text and "<hidden>" in text
    assert KEY not in json.dumps(supervisor_client.status().to_dict())


def test_the_key_is_masked_on_the_settings_rows(qhome, tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text("[server]\nport = 8001\n")
    s = S.load(config=str(cfg))
    saved = apply_edit(s, "server", "api_key", KEY)
    assert KEY not in saved.note and KEY not in saved.text
    assert stat.S_IMODE(cfg.stat().st_mode) == 0o600  # a config that holds a key is user-only
    row = next(r for r in build_rows(saved.settings) if r.dotted == "server.api_key")
    assert KEY not in row.value_text and KEY not in row.file_text and row.edit_text == ""


def test_warnings_name_a_key_file_or_config_others_can_read(qhome, keyfile, tmp_path):
    keyfile.chmod(0o644)
    s = S.load(overrides=[f"server.api_key_file={keyfile}"])
    assert any(f"{keyfile} is readable by others (mode 0644)" in w for w in apikey.warnings(s))
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[server]\napi_key = "{KEY}"\n')
    cfg.chmod(0o644)
    s = S.load(config=str(cfg))
    assert any("holds server.api_key and is readable by others" in w for w in apikey.warnings(s))
    assert all(KEY not in w for w in apikey.warnings(s))


def test_an_unreadable_key_file_is_a_launch_problem_not_a_traceback(qhome, tmp_path, capsys):
    s = S.load(overrides=[f"server.api_key_file={tmp_path / 'missing'}"])
    launch = build_launch(s, VllmInstall("vllm", "0.11.0", sys.executable))
    assert any("cannot read" in p for p in launch.problems)


def test_extra_args_api_key_is_refused(qhome):
    s = S.load(overrides=['server.extra_args=["--api-key", "x"]'])
    assert any("readable" in p or "ps" in p for p in build_launch(s, VllmInstall("vllm", "0.11.0", "py")).problems)


def test_a_set_key_never_reaches_the_supervisors_argv(qhome):
    from backend import spawn

    child = spawn.supervisor(spawn.Origin(demo=True, overrides=(f"server.api_key={KEY}", "server.port=1")))
    assert child.argv[3:] == ["--demo", "--set", "server.port=1", "serve", "--quiet"]
    assert not any(KEY in a for a in child.argv) and child.env == {"QWEN_TUI_API_KEY": KEY}


@pytest.mark.parametrize("host, key, warned", [
    ("0.0.0.0", None, True), ("192.168.1.5", None, True), ("127.0.0.1", None, False),
    ("0.0.0.0", KEY, False), ("::1", None, False),
])
def test_exposure_without_a_key_is_a_warning(qhome, host, key, warned, capsys):
    sets = [f"server.host={host}"] + ([f"server.api_key={key}"] if key else [])
    s = S.load(overrides=sets)
    assert (apikey.exposure(s) is not None) == warned
    main([*sum((["--set", x] for x in sets), []), "print-command"])
    assert ("reachable from the network without a key" in capsys.readouterr().out) == warned


def test_the_chat_sends_the_key_as_a_bearer_token(qhome, keyfile):
    import asyncio

    import httpx

    from backend.chat.stream import stream_chat

    seen = {}

    def handler(request: httpx.Request) -> httpx.Response:
        seen["auth"] = request.headers.get("authorization")
        return httpx.Response(200, text='data: {"choices":[{"delta":{"content":"hi"}}]}\n\ndata: [DONE]\n\n')

    s = S.load(overrides=[f"server.api_key_file={keyfile}"])

    async def go():
        return [d.text async for d in stream_chat(s.base_url, "m", [], api_key=s.api_key,
                                                  transport=httpx.MockTransport(handler))]

    assert asyncio.run(go()) == ["hi"] and seen["auth"] == f"Bearer {KEY}"


def test_the_launch_keeps_the_default_launch_shape(qhome):
    launch = Launch(["x"], {}, VllmInstall(None, None, "py"), [])
    assert launch.secret_env == {} and "QWEN_TUI_API_KEY" not in launch.full_env()


def test_doctor_warns_about_exposure_and_readable_key_files(qhome, keyfile):
    from backend.doctor import Context, Env
    from backend.doctor.key_checks import check_security

    def check(*sets):
        return check_security(Context(S.load(overrides=list(sets)), Env()))

    assert check("server.host=0.0.0.0").status == "warn"
    assert "without a key" in check("server.host=0.0.0.0").message
    ok = check("server.host=0.0.0.0", f"server.api_key_file={keyfile}")
    assert ok.status == "ok" and KEY not in ok.message and str(keyfile) in ok.message
    keyfile.chmod(0o640)
    assert check(f"server.api_key_file={keyfile}").status == "warn"
    assert check(f"server.api_key_file={keyfile}.missing").status == "fail"


async def test_the_console_asks_before_starting_reachable_without_a_key(qhome):
    from backend.server.client import Poll
    from tests.helpers.console import app_with, wait_until
    from tui.screens.exposure import ExposureScreen
    from tui.screens.main import MainScreen

    app, client = app_with([Poll(state={"state": "stopped"})], qhome, "server.host=0.0.0.0")
    async with app.run_test(size=(150, 45)) as pilot:
        await pilot.press("s")
        assert await wait_until(pilot, lambda: isinstance(app.screen, ExposureScreen))
        assert "reachable from the network without a key" in str(app.screen.query_one("#warning").render())
        await pilot.press("escape")
        assert await wait_until(pilot, lambda: isinstance(app.screen, MainScreen))
        await pilot.pause(0.2)
        assert client.actions == []
        await pilot.press("s")
        assert await wait_until(pilot, lambda: isinstance(app.screen, ExposureScreen))
        await pilot.press("y")
        assert await wait_until(pilot, lambda: client.actions == ["start"])
