"""Pilot tests of the one-key fix (f): the failure banner shows the fix as a diff with the ledger's
verdict; f saves it into the config file in use (comments kept) and restarts; a fix that comes from
--set is shown with what to change instead and never applied."""

from __future__ import annotations

from backend.server.client import Poll
from backend.settings import load
from tests.helpers.console import ScriptedClient, wait_until
from tui.app import make_app
from tui.widgets.failure_banner import FailureBanner

KV = {"kind": "kv_cache_too_small", "fix": "lower server.max_model_len",
      "message": "ValueError: To serve at least one request with the models's max seq len (32768), (0.38 GiB KV "
                 "cache) is needed, which is larger than the available KV cache memory (0.27 GiB). Based on the "
                 "available memory, the estimated maximum model length is 23648."}
CONFIG = '# my box\n[server]\nmodel = "Qwen/Qwen2.5-0.5B-Instruct"\nmax_model_len = 32768  # long chats\n'


def app_for(tmp_path, *overrides):
    cfg = tmp_path / "config.toml"
    cfg.write_text(CONFIG)
    client = ScriptedClient([Poll(state={"state": "failed", "failure": KV})])
    return make_app(load(config=str(cfg), overrides=["console.on_exit=ask", *overrides]), client), client, cfg


def banner_text(app) -> str:
    return str(app.screen.query_one(FailureBanner).render())


async def test_f_saves_the_fix_into_the_file_and_restarts(qhome, tmp_path):
    app, client, cfg = app_for(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        assert await wait_until(pilot, lambda: "f: apply and restart" in banner_text(app), tries=200)
        text = banner_text(app)
        assert "server.max_model_len: 32768 -> 23648" in text and "the ledger says it fits" in text
        await pilot.press("f")
        assert await wait_until(pilot, lambda: "start" in client.actions, tries=200)
        assert client.actions == ["stop", "start"]  # the restart, on the saved settings
        saved = cfg.read_text()
        assert "max_model_len = 23648" in saved and "# my box" in saved and "# long chats" in saved
        assert app.settings.server["max_model_len"] == 23648


async def test_a_fix_from_set_says_what_to_change_and_f_does_not_apply_it(qhome, tmp_path):
    app, client, cfg = app_for(tmp_path, "server.max_model_len=32768")
    async with app.run_test(size=(80, 24)) as pilot:
        assert await wait_until(pilot, lambda: "no one-key fix" in banner_text(app), tries=200)
        assert "--set server.max_model_len=23648" in banner_text(app)
        await pilot.press("f")
        assert await wait_until(pilot, lambda: any("not applied: server.max_model_len comes from `--set" in n.message
                                                   for n in app._notifications))
        assert client.actions == [] and cfg.read_text() == CONFIG


async def test_a_stalled_start_is_on_the_status_line_and_k_dumps_the_stacks(qhome, tmp_path):
    from tui.widgets.status_bar import StatusBar

    stall = {"phase": "loading_weights", "text": "loading weights for 6 min (usually 40 s)", "dump": "qwen-tui stacks"}
    client = ScriptedClient([Poll(state={"state": "starting", "stall": stall})])
    app = make_app(load(overrides=["console.on_exit=ask"]), client)
    async with app.run_test(size=(80, 24)) as pilot:
        bar = app.screen.query_one(StatusBar)
        assert await wait_until(pilot, lambda: "loading weights for 6 min (usually 40 s): k dumps the stacks"
                                in bar.last_text, tries=200)
        await pilot.press("k")  # no supervised server in this test's state dir: it says so
        assert await wait_until(pilot, lambda: any("no server process to dump" in n.message
                                                   for n in app._notifications), tries=200)


async def test_the_preflight_offers_the_same_one_key_fix_and_a_saves_it_and_starts(qhome, tmp_path):
    """Issue 30: a launch the ledger says will fail (the weights over a tiny budget) is stopped before it
    is wasted, with the fix the failure banner would offer after it; a saves it (comments kept) and starts."""
    from tui.screens.preflight import PreflightScreen

    cfg = tmp_path / "config.toml"
    cfg.write_text('# my box\n[server]\nmodel = "Qwen/Qwen2.5-0.5B-Instruct"\n'
                   "gpu_memory_utilization = 0.03  # tight\n")
    client = ScriptedClient([Poll(state={"state": "stopped"})])
    app = make_app(load(config=str(cfg), overrides=["console.on_exit=ask"]), client)
    async with app.run_test(size=(80, 24)) as pilot:
        assert await wait_until(pilot, lambda: app.screen.plan is not None, tries=200)
        await pilot.press("s")
        assert await wait_until(pilot, lambda: isinstance(app.screen, PreflightScreen), tries=200)
        text = str(app.screen.query_one("#problems").render())
        assert "weights-exceed-budget" in text and "a: apply the fix and start" in text, text
        assert "server.gpu_memory_utilization: 0.03 ->" in text and "the ledger says it fits" in text, text
        assert "a: apply the fix" in str(app.screen.query_one("#keys").render())
        await pilot.press("a")
        assert await wait_until(pilot, lambda: "start" in client.actions, tries=200)
        saved = cfg.read_text()
        new = app.settings.server["gpu_memory_utilization"]
        assert 0.03 < new < 0.95 and f"gpu_memory_utilization = {new}  # tight" in saved and "# my box" in saved
        assert not app.screen.plan.get("problems") or all(p["severity"] != "error" for p in app.screen.plan["problems"])


async def test_a_preflight_with_no_settings_fix_says_so_and_a_does_nothing(qhome):
    from tests.helpers.console import app_with
    from tui.screens.preflight import PreflightScreen

    app, client = app_with([Poll(state={"state": "stopped"})], qhome, "server.tensor_parallel_size=3",
                           "planner.gpu_count=4")
    async with app.run_test(size=(80, 24)) as pilot:
        assert await wait_until(pilot, lambda: app.screen.plan is not None, tries=200)
        await pilot.press("s")
        assert await wait_until(pilot, lambda: isinstance(app.screen, PreflightScreen), tries=200)
        assert "a: apply" not in str(app.screen.query_one("#keys").render())
        await pilot.press("a")
        assert await wait_until(pilot, lambda: any("no one-key fix here" in n.message for n in app._notifications))
        assert isinstance(app.screen, PreflightScreen) and client.actions == []
