"""End to end with an API key (issue 17), on the real vLLM CPU demo server: the key comes from a
0600 key file, /v1/models without it answers 401, the CLI and the console chat with it, and the key
is in no process's argv, no output, no log and no state file."""

from __future__ import annotations

import json
import os
from pathlib import Path

import httpx
import psutil
import pytest

from tests.helpers.e2e import START_TIMEOUT, cli, pilot_waiter, qwen_home, wait_state

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def keyed(tmp_path_factory, vllm_lock):
    from backend.server import procs

    home = tmp_path_factory.mktemp("e2e-key-home")
    with qwen_home(home):
        from backend.server import owners

        assert not owners.start_blockers("127.0.0.1", 8011), "port 8011 is taken"
        keyfile = home / "api_key"
        outputs = []
        r = cli("gen-key", "--file", str(keyfile))
        outputs.append(r.stdout + r.stderr)
        key = keyfile.read_text().strip()
        opts = ["--demo", "--set", f"server.api_key_file={keyfile}"]
        r = cli(*opts, "serve", "--detach", timeout=60)
        outputs.append(r.stdout + r.stderr)
        assert r.returncode == 0, r.stderr
        st = wait_state({"ready", "failed"}, START_TIMEOUT)
        assert st["state"] == "ready", st
        pgid = os.getpgid(st["pid"])
        yield {"key": key, "opts": opts, "home": home, "status": st, "outputs": outputs}
        cli("stop", timeout=120)
        for pid in procs.group_members(pgid):  # never leave this test's server behind
            try:
                os.kill(pid, 9)
            except OSError:
                pass


def test_the_v1_api_wants_the_key(keyed):
    base = keyed["status"]["base_url"]
    assert httpx.get(f"{base}/v1/models", timeout=10, trust_env=False).status_code == 401
    ok = httpx.get(f"{base}/v1/models", timeout=10, trust_env=False,
                   headers={"Authorization": f"Bearer {keyed['key']}"})
    assert ok.status_code == 200 and [m["id"] for m in ok.json()["data"]] == ["qwen-tui-demo"]
    assert httpx.get(f"{base}/health", timeout=10, trust_env=False).status_code == 200


def test_the_cli_chats_with_the_key_and_without_it_is_told_the_fix(keyed):
    r = cli(*keyed["opts"], "chat", "--json", "--max-tokens", "8", "Hello")
    keyed["outputs"].append(r.stdout + r.stderr)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["completion_tokens"] == 8
    r = cli("--demo", "chat", "Hello")  # no key configured
    keyed["outputs"].append(r.stdout + r.stderr)
    assert r.returncode == 1 and "401" in r.stderr and "api_key_file" in r.stderr


async def test_the_console_chats_with_the_key(keyed):
    from textual.widgets import Static

    from backend.server.client import ServerClient
    from backend.settings import load
    from backend.spawn import origin_of
    from tui.app import make_app
    from tui.widgets.chat_pane import ChatPane

    settings = load(demo=True, overrides=keyed["opts"][2:3])
    app = make_app(settings, ServerClient(origin_of(settings)))
    async with app.run_test(size=(160, 48)) as pilot:
        until = pilot_waiter(pilot, 90)
        await pilot.press("c", *"Hello there", "enter")
        pane = app.screen.query_one(ChatPane)
        assert await until(lambda: len(pane.conversation.turns) == 2 and not pane.streaming), \
            [str(w.render()) for w in pane.query(".error").results(Static)]
        shown = " ".join(str(w.render()) for w in app.screen.query(Static).results(Static))
        assert keyed["key"] not in shown
        app.exit()


def test_the_key_is_in_no_argv_output_log_or_state_file(keyed):
    key = keyed["key"]
    for r in (cli(*keyed["opts"], "status", "--json"), cli(*keyed["opts"], "print-command"),
              cli(*keyed["opts"], "print-command", "--json"), cli(*keyed["opts"], "doctor"),
              cli(*keyed["opts"], "logs", "-n", "400")):
        keyed["outputs"].append(r.stdout + r.stderr)
    assert all(key not in out for out in keyed["outputs"])
    assert "VLLM_API_KEY=<hidden>" in keyed["outputs"][-4]
    for p in psutil.process_iter(["cmdline"]):
        assert key not in " ".join(p.info["cmdline"] or []), p.pid
    files = [f for f in Path(keyed["home"]).rglob("*") if f.is_file() and f.name != "api_key"]
    assert any(f.name == "server.json" for f in files) and any(f.suffix == ".log" for f in files)
    for f in files:
        assert key.encode() not in f.read_bytes(), f
    # the server itself has it, by environment only
    api = psutil.Process(keyed["status"]["pid"])
    assert api.environ().get("VLLM_API_KEY") == key and key not in " ".join(api.cmdline())
