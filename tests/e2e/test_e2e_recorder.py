"""The flight recorder end to end on the real vLLM CPU demo: a bench, a request that fails (404), a kill -9 of
the API process and its restart, then `qwen-tui history` and the console's history view at 80×24 show them
(the events on the time axis, the HTTP errors counted, the store bounded). The idle timer runs against the
demo's real /metrics with the sleep call FAKED (vLLM's sleep needs a GPU; the CPU build refuses the flag).

The vllm_lock fixture: one demo server on this machine at a time (by hand: `flock /tmp/qwen-tui-vllm.lock`)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest

from backend import history, recorder
from backend.server import idle_sleep, procs
from tests.helpers.e2e import START_TIMEOUT, cli, kill_left_vllm, qwen_home, wait_for, wait_state

pytestmark = pytest.mark.e2e
SETS = ["--set", "console.history_interval_s=1", "--set", "console.history_keep_h=0.5"]


@pytest.fixture(scope="module")
def server(tmp_path_factory, vllm_lock):
    home = tmp_path_factory.mktemp("e2e-recorder")
    with qwen_home(home):
        assert not procs.find_vllm_processes(), "vLLM processes are already running on this machine"
        try:
            r = cli("--demo", *SETS, "serve", "--detach", timeout=60)
            assert r.returncode == 0, r.stderr
            st = wait_state({"ready", "failed"}, START_TIMEOUT)
            assert st["state"] == "ready", (st.get("detail"), st.get("failure"), st.get("last_failure"))
            yield dict(st, home=home)
        finally:
            cli("stop", timeout=120)
            kill_left_vllm()


def _history(*args: str) -> dict:
    r = cli("history", "--since", "1h", "--json", *args, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _bench(requests: int = 8, tokens: int = 32) -> dict:
    r = cli("--demo", *SETS, "bench", "--requests", str(requests), "--concurrency", "4", "--max-tokens", str(tokens),
            "--prompt-tokens", "32", "--json", timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout)


class FakeSleepSup:
    """What the idle timer reads of a supervisor; `fake_sleep_call` is FAKED (no POST /sleep is sent)."""

    def __init__(self, idle_s: float) -> None:
        self.recorder: recorder.Recorder | None = None
        self.settings = SimpleNamespace(server_cfg=SimpleNamespace(sleep_after_idle_s=idle_s, tensor_parallel_size=1))
        self.sleep = SimpleNamespace(enabled=True, busy=None)
        self.parser = SimpleNamespace(snapshot=lambda: {})
        self.state, self.detail, self.asked = "ready", "", []

    def _write_state(self) -> None:
        pass

    async def fake_sleep_call(self, sup, req):  # FAKED
        self.asked.append((time.time(), req))
        self.state = "sleeping"
        return {"ok": True}


def test_idle_timer_against_the_demos_metrics_with_the_sleep_faked(server, tmp_path):
    sup = FakeSleepSup(idle_s=3.0)
    sup.state = "starting"  # to the timer: READY once the bench's first request is seen
    sup.recorder = rec = recorder.Recorder(tmp_path, lambda: ("ready", server["base_url"]), interval_s=0.5)
    rec.start()
    th = threading.Thread(target=_bench, kwargs={"requests": 24, "tokens": 96})
    seen: dict = {}

    async def fake_sleep_call(s, req):  # FAKED, as FakeSleepSup's: and whether the bench still ran then
        seen["bench_running"] = th.is_alive()
        seen["busy_at"] = rec.busy_at
        return await sup.fake_sleep_call(s, req)

    async def run() -> None:
        task = asyncio.create_task(idle_sleep.watch(sup, tick_s=0.1, sleep_call=fake_sleep_call))
        try:
            th.start()
            while rec.busy_at is None and th.is_alive():
                await asyncio.sleep(0.05)
            seen["first_busy"] = rec.busy_at
            sup.state = "ready"  # from here the timer runs: it must not fire while the bench keeps the server busy
            while th.is_alive():
                await asyncio.sleep(0.1)
            deadline = time.time() + 60
            while not sup.asked and time.time() < deadline:
                await asyncio.sleep(0.1)
        finally:
            task.cancel()

    try:
        asyncio.run(run())
    finally:
        rec.stop()
    assert rec.error is None, rec.error
    assert rec.samples >= 4 and len(sup.asked) == 1, (rec.samples, sup.asked)
    at, req = sup.asked[0]
    assert req["action"] == "sleep" and req["level"] == 1
    assert seen["bench_running"] is False  # not while the bench's requests kept it busy
    assert seen["busy_at"] >= seen["first_busy"]  # the last activity seen is the bench's (the demo is quick)
    assert at - seen["busy_at"] >= 3.0 - 0.2  # 3 s of quiet after the last activity (one tick of slack)


def test_bench_404_kill_9_restart_are_recorded(server):
    _bench()
    r = httpx.post(server["base_url"] + "/v1/chat/completions", timeout=30,
                   json={"model": "no-such-model", "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 404
    wait_for(lambda: (lambda s: s["requests_finished"] >= 8 and s["http_errors"] >= 1)(_history()["summary"]),
             60, every=1.0, what="the bench and the 404 in the history")
    api_pid = cli_status()["pid"]
    os.kill(api_pid, signal.SIGKILL)
    wait_state({"failed", "backoff"}, 30)
    st = wait_state({"ready"}, START_TIMEOUT)
    assert st["restarts"] == 1
    wait_for(lambda: any(s["t"] > st["ready_at"] for s in _history()["samples"]), 30, every=1.0,
             what="a sample of the restarted server")
    h = _history()
    kinds = [e["kind"] for e in h["events"]]
    assert kinds[:2] == ["starting", "ready"], kinds
    i = next(n for n, k in enumerate(kinds) if k in ("died", "failed"))  # the kill -9 (died: cleaned up)
    assert "restart" in kinds[i:] and "ready" in kinds[kinds.index("restart"):], kinds
    s = h["summary"]
    assert s["http_requests"].get("4xx", 0) >= 1 and s["http_requests"].get("2xx", 0) >= 8
    assert s["requests_finished"] >= 8 and s["ttft_p50_s"] is not None and s["generation_tokens_per_s"] is not None
    # the counters of the new server start again: no negative interval anywhere
    assert all((x["finished"] or 0) >= 0 and (x["gen_tps"] or 0) >= 0 for x in h["samples"])
    db = recorder.db_path(_state_dir())
    n = len(_history("--since", "2d")["samples"])
    assert n <= recorder.Recorder(db.parent, lambda: ("", None), interval_s=1, keep_h=0.5).max_rows
    assert db.stat().st_size < 2 * 2**20
    text = cli("history", "--since", "1h", timeout=60).stdout
    assert "event" in text and "restart" in text and "4xx" in text and all(len(x) <= 80 for x in text.splitlines())


async def test_console_history_view_shows_them_at_80x24(server):
    from backend.server.client import Poll
    from tests.helpers.console import READY, app_with, wait_until
    from tui.screens.history import HistoryScreen

    app, _ = app_with([Poll(state=READY)], server["home"])
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("h")
        assert await wait_until(pilot, lambda: isinstance(app.screen, HistoryScreen) and app.screen.lines, tries=200)
        lines = app.screen.lines
        events = next(x for x in lines if x.startswith("events"))
        # at 80 columns a slice of the hour is ~63 s: this run's events share the last two, the worst shown
        assert "F" in events and "S" in events, lines
        assert "4xx:" in lines[-2], lines
        assert all(len(x) <= 76 for x in lines)


def test_stop_is_recorded(server):
    assert cli("stop", timeout=120).returncode == 0

    def kinds() -> list[str]:  # the supervisor's last events are written as it exits, after the state file
        return [e["kind"] for e in history.load(recorder.db_path(_state_dir()), 3600).events]

    wait_for(lambda: kinds()[-2:] == ["stopping", "stopped"], 15, what=f"the stop in the history: {kinds()}")


def cli_status() -> dict:
    return json.loads(cli("status", "--json", timeout=30).stdout)


def _state_dir() -> Path:
    from backend.server import statefile

    return statefile.state_path().parent
