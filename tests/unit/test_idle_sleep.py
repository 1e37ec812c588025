"""Sleep when idle (backend/server/idle_sleep.py): the timer fed by the flight recorder reading a FAKE /metrics
server; the sleep call itself is FAKED (fake_sleep_call below: vLLM's sleep needs a GPU)."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

from backend import history, recorder
from backend.server import idle_sleep
from backend.server.launch import build_launch
from backend.settings import load
from tests.helpers.fake_metrics import FakeMetrics


def test_the_timer_counts_from_ready_or_the_last_activity_and_needs_a_fresh_idle_sample():
    t = idle_sleep.IdleTimer(10)
    idle = {"t": 100.0, "running": 0, "waiting": 0}
    assert not t.due("starting", 90.0, None, None, 3)
    assert not t.due("ready", 100.0, None, idle, 3)  # READY at 100
    assert not t.due("ready", 109.0, None, dict(idle, t=108.0), 3)
    assert t.due("ready", 110.5, None, dict(idle, t=110.0), 3)
    assert not t.due("ready", 110.5, 105.0, dict(idle, t=110.0), 3)  # a request finished at 105
    assert t.due("ready", 115.5, 105.0, dict(idle, t=115.0), 3)
    assert not t.due("ready", 120.0, None, dict(idle, t=115.0), 3)  # no sample for 5 s: not proven
    assert not t.due("ready", 120.0, None, dict(idle, t=119.0, waiting=1), 3)
    assert not t.due("sleeping", 200.0, None, dict(idle, t=199.0), 3)
    assert not t.due("ready", 205.0, None, dict(idle, t=204.0), 3)  # woke at 205: counts from there


class Sup:
    """The few supervisor attributes the idle timer reads, and a FAKE sleep call that records requests."""

    def __init__(self, idle_s: float, enabled: bool = True) -> None:
        self.settings = SimpleNamespace(server_cfg=SimpleNamespace(sleep_after_idle_s=idle_s, tensor_parallel_size=1))
        self.sleep = SimpleNamespace(enabled=enabled, busy=None)
        self.parser = SimpleNamespace(snapshot=lambda: {"weights_gib": 0.01})
        self.state, self.detail, self.writes = "ready", "", 0
        self.requests: list[dict] = []

    def _write_state(self) -> None:
        self.writes += 1

    async def fake_sleep_call(self, sup, req):  # FAKED: no POST /sleep or /wake_up, only the state change
        self.requests.append(req)
        if req["action"] == "wake":
            self.state, self.detail = "ready", "woke"
            return {"ok": True, "message": "awake"}
        self.state, self.detail = "sleeping", f"level {req['level']}: freed"
        return {"ok": True, "message": "asleep"}


async def _wait(pred, timeout=15.0):
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)


async def test_a_busy_server_is_kept_awake_and_an_idle_one_is_put_to_sleep_once(tmp_path):
    with FakeMetrics() as fake:
        fake.values["vllm:num_requests_running"] = 2.0
        sup = Sup(idle_s=1.0)
        sup.recorder = rec = recorder.Recorder(tmp_path, lambda: (sup.state, fake.base_url), interval_s=0.1)
        rec.start()
        task = asyncio.create_task(idle_sleep.watch(sup, tick_s=0.05, sleep_call=sup.fake_sleep_call))
        try:
            await _wait(lambda: rec.samples >= 20)  # ~2 s of a busy server: twice the idle time
            assert sup.requests == []
            fake.values["vllm:num_requests_running"] = 0.0
            quiet_from = time.time()
            await _wait(lambda: sup.requests)
            # idle counts from the last sample that saw a request: read up to one interval before the switch
            assert time.time() - quiet_from >= 1.0 - rec.interval
            assert sup.requests[0]["action"] == "sleep" and sup.requests[0]["level"] == 1
            assert sup.state == "sleeping" and sup.detail.startswith("asleep after 1 s idle; level 1")
            n = rec.samples
            get, post = ('http_requests_total{handler="/v1/models",method="GET",status="2xx"} ',
                         'http_requests_total{handler="/v1/chat/completions",method="POST",status="2xx"} ')
            fake.text = fake.text.replace(get + "1.0", get + "99.0")  # GETs (a console's /v1/models): no wake
            await _wait(lambda: rec.samples >= n + 10)
            assert len(sup.requests) == 1  # asleep: not asked again, not woken
            fake.text = fake.text.replace(post + "2.0", post + "3.0")
            await _wait(lambda: len(sup.requests) == 2)  # a client POSTed a chat while it slept: woken
            assert sup.requests[1]["action"] == "wake" and sup.state == "ready"
        finally:
            task.cancel()
            rec.stop()
    kinds = [e["kind"] for e in history.load(rec.path, 3600).events]
    assert kinds == ["idle_sleep", "wake_on_request"]


def test_the_waker_needs_a_new_post_to_v1_or_a_request_in_the_queue():
    from backend.recorder import Reading

    w = idle_sleep.RequestWaker()
    before = Reading(at=99.0, values={"gen_http": 5.0, "running": 0.0, "waiting": 0.0})
    assert not w.due("sleeping", 100.0, before)  # fell asleep: 5 POSTs so far
    assert not w.due("sleeping", 101.0, before)  # the reading is from before the sleep
    assert not w.due("sleeping", 106.0, Reading(at=105.0, values={"gen_http": 5.0}))
    assert w.due("sleeping", 111.0, Reading(at=110.0, values={"gen_http": 6.0}))
    assert w.due("sleeping", 111.0, Reading(at=110.0, values={"gen_http": 5.0, "waiting": 1.0}))
    assert not w.due("ready", 112.0, Reading(at=110.0, values={"gen_http": 9.0}))  # awake: nothing to do


def test_a_request_in_flight_wakes_at_once_where_the_counters_have_not_moved():
    from backend.recorder import Reading

    w = idle_sleep.RequestWaker()
    still = Reading(at=99.0, values={"gen_http": 5.0, "running": 0.0, "waiting": 0.0})
    assert not w.due("sleeping", 100.0, still, 1)  # the tick it fell asleep on only takes the base
    assert not w.due("sleeping", 106.0, still, 0)
    assert not w.due("sleeping", 107.0, still, None)  # /load not readable: the counters decide, as before
    assert w.due("sleeping", 108.0, still, 1)  # a client waits on the sleeping engine (H200: 0.20.2 held it)
    assert not w.due("ready", 109.0, still, 3)  # awake: nothing to do


async def test_a_client_that_waits_on_the_sleeping_server_wakes_it_through_load(tmp_path):
    with FakeMetrics() as fake:
        fake.load = 0
        sup = Sup(idle_s=0.5)
        sup.recorder = rec = recorder.Recorder(tmp_path, lambda: (sup.state, fake.base_url), interval_s=0.1)
        rec.start()
        task = asyncio.create_task(idle_sleep.watch(sup, tick_s=0.05, sleep_call=sup.fake_sleep_call))
        try:
            await _wait(lambda: sup.state == "sleeping")
            n = rec.samples
            await _wait(lambda: rec.samples >= n + 5)
            assert len(sup.requests) == 1  # nothing in flight, counters still: asleep
            fake.load = 1  # a chat held by the sleeping engine: http_requests_total has not moved
            await _wait(lambda: len(sup.requests) == 2)
            assert sup.requests[1]["action"] == "wake" and sup.state == "ready"
        finally:
            task.cancel()
            rec.stop()


def test_in_flight_reads_load_and_says_none_where_it_cannot(tmp_path):
    with FakeMetrics() as fake:
        assert idle_sleep.in_flight(fake.base_url) is None  # no load tracking: 404
        fake.load = 2
        assert idle_sleep.in_flight(fake.base_url) == 2
    assert idle_sleep.in_flight("http://127.0.0.1:9") is None  # nothing listens


def test_the_idle_timer_turns_on_vllms_in_flight_count_and_nothing_else_does():
    on = build_launch(load(None, overrides=["server.sleep_after_idle_s=600", "server.enable_sleep_mode=true"]))
    assert on.argv.count("--enable-server-load-tracking") == 1
    assert "--enable-server-load-tracking" not in build_launch(load(None)).argv
    off = build_launch(load(None, overrides=["server.sleep_after_idle_s=600"]))  # no sleep mode: never sleeps
    assert "--enable-server-load-tracking" not in off.argv


async def test_off_without_sleep_mode_and_said_so(tmp_path):
    sup = Sup(idle_s=1.0, enabled=False)
    events = []
    sup.recorder = SimpleNamespace(event=lambda kind, detail: events.append((kind, detail)))
    await asyncio.wait_for(idle_sleep.watch(sup, sleep_call=sup.fake_sleep_call), 2)
    assert events and events[0][0] == "note" and "enable_sleep_mode" in events[0][1]


def test_the_setting_is_the_supervisors_not_a_vllm_flag():
    argv = build_launch(load(None, overrides=["server.sleep_after_idle_s=600"])).argv
    assert not any("idle" in a for a in argv)


def test_the_level_is_1_where_the_weights_fit_in_free_ram_and_2_where_they_do_not():
    import psutil

    free_gib = psutil.virtual_memory().available / (1 << 30)
    settings = load(demo=True, overrides=["server.tensor_parallel_size=2"])

    def sup(weights_gib):
        return SimpleNamespace(parser=SimpleNamespace(snapshot=lambda: {"weights_gib": weights_gib}),
                               settings=settings)

    assert idle_sleep._level(sup(0.001)) == 1
    assert idle_sleep._level(sup(free_gib)) == 2  # two ranks of it: twice the free RAM
    assert idle_sleep._level(SimpleNamespace()) == 1  # nothing to read: the default level
