"""The flight recorder (backend/recorder.py) and its reader (backend/history.py, `qwen-tui history`):
parsed with prometheus_client, deltas across a restart, exact bucket percentiles, the store bounded,
never blocking its caller."""

from __future__ import annotations

import csv
import io
import json
import time

import pytest

from backend import history, recorder
from backend.cli import main
from tests.helpers.fake_metrics import FIXTURE, FakeMetrics

IDLE = (FIXTURE.parent / "vllm-0.32-cpu-idle.txt").read_text()
AFTER = FIXTURE.read_text()


def test_a_reading_sums_engines_and_keeps_http_by_status_and_the_buckets():
    r = recorder.parse(AFTER, at=1.0)
    assert r.values["gen"] == 56 and r.values["prompt"] == 85 and r.values["finished"] == 2
    assert r.values["running"] == 0 and r.values["kv"] == 0
    assert r.http == {"2xx": 3.0}
    assert r.ttft["0.01"] == 1 and r.ttft["+Inf"] == 2 and r.queue["0.3"] == 2
    with pytest.raises(ValueError, match="malformed"):
        recorder.parse("vllm:num_requests_running{engine=\"0\" 1\n")


def test_a_row_has_rates_deltas_and_only_the_buckets_that_moved():
    a, b = recorder.parse(IDLE, at=0.0), recorder.parse(AFTER, at=5.0)
    r = recorder.row(b, a, "ready", (2.0e9, 150.0))
    assert r["gen_tps"] == pytest.approx(56 / 5) and r["finished"] == 2 and r["preempt"] == 0
    assert json.loads(r["http"]) == {"2xx": 2.0}
    assert json.loads(r["ttft"]) == {"0.01": 1.0, "0.02": 1.0}
    assert r["gpu_mem"] == 2.0e9 and r["gpu_power"] == 150.0
    assert recorder.busy(b, a) and not recorder.busy(a, a)
    first = recorder.row(a, None, "ready", (None, None))  # the first read of a server: no interval yet
    assert first["gen_tps"] is None and first["http"] is None and first["finished"] is None


def test_a_counter_that_went_down_is_a_new_server_counted_from_zero():
    a, b = recorder.parse(AFTER, at=0.0), recorder.parse(IDLE, at=5.0)
    r = recorder.row(b, a, "ready", (None, None))
    assert r["finished"] == 0 and json.loads(r["http"]) == {"2xx": 1.0}  # IDLE's own count, not -2
    assert r["ttft"] is None


def test_quantiles_interpolate_within_the_bucket_as_prometheus_does():
    h = {"0.1": 50.0, "0.5": 40.0, "1.0": 10.0}
    assert history.quantile(0.5, h) == pytest.approx(0.1)
    assert history.quantile(0.7, h) == pytest.approx(0.1 + 0.4 * (20 / 40))
    assert history.quantile(0.99, {"0.1": 1.0, "+Inf": 9.0}) == 0.1  # past the last finite bucket
    assert history.quantile(0.5, {}) is None


def _rows(n: int, t0: float, dt: float = 5.0) -> list[dict]:
    return [{"t": t0 + i * dt, "state": "ready", "running": 0.0, "waiting": 0.0, "kv": 0.0, "gen_tps": 0.0,
             "prompt_tps": 0.0, "preempt": 0.0, "finished": 0.0, "http": None, "ttft": None, "queue": None,
             "gpu_mem": None, "gpu_power": None} for i in range(n)]


def test_the_store_is_bounded_by_rows_and_by_age(tmp_path):
    store = recorder.Store(tmp_path / "h.db", keep_s=3600, max_rows=300)
    now = time.time()
    for r in _rows(2000, now - 1500, dt=0.5):
        store.add_sample(r)
    n = store.db.execute("SELECT count(*) FROM samples").fetchone()[0]
    assert n <= 300 + recorder.PRUNE_EVERY
    size = (tmp_path / "h.db").stat().st_size
    for r in _rows(2000, now - 500, dt=0.25):
        store.add_sample(r)
    store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    assert (tmp_path / "h.db").stat().st_size <= size * 1.5  # the freed pages are reused
    store.prune(now=now + 3600 - 100)  # an hour on: only the last 100 s kept
    assert store.db.execute("SELECT min(t) FROM samples").fetchone()[0] >= now - 100
    store.close()


def test_a_day_of_idle_samples_is_a_few_megabytes(tmp_path):
    store = recorder.Store(tmp_path / "h.db", keep_s=86400 * 2, max_rows=10**6)
    now = time.time()
    store.db.executemany("INSERT INTO samples (t, state, running, waiting, kv, gen_tps, prompt_tps, preempt, "
                         "finished, gpu_mem, gpu_power) VALUES (?, 'ready', 0, 0, 0.0123, 0, 0, 0, 0, 4.4e10, 71.5)",
                         [(now - 86400 + i * 5,) for i in range(17280)])
    store.db.commit()
    store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    size = (tmp_path / "h.db").stat().st_size
    store.close()
    assert size < 3 * 2**20, size


def test_the_recorder_thread_samples_records_events_and_never_blocks(tmp_path):
    with FakeMetrics() as fake:
        state = {"s": "starting"}
        rec = recorder.Recorder(tmp_path, lambda: (state["s"], fake.base_url), interval_s=0.05)
        rec.start()
        rec.event("starting", "pid 1")
        state["s"] = "ready"
        rec.event("ready", "2.0 s after launch")
        deadline = time.monotonic() + 10
        while rec.samples < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        fake.values["vllm:generation_tokens_total"] = 1000.0
        n = rec.samples
        while rec.samples < n + 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        fake.delay_s = 1.5  # a hung /metrics: event() still returns at once
        t0 = time.perf_counter()
        for _ in range(2 * recorder.EVENT_QUEUE_MAX):
            rec.event("noise", "x")
        assert time.perf_counter() - t0 < 0.5 and rec.dropped_events > 0
        rec.stop(timeout=5)
        fake.delay_s = 0
    assert rec.error is None or "/metrics" in rec.error
    win = history.load(recorder.db_path(tmp_path), 3600)
    assert [e["kind"] for e in win.events][:2] == ["starting", "ready"]
    assert len(win.samples) >= 5 and max(s["gen_tps"] or 0 for s in win.samples) > 0
    assert rec.busy_at is not None


def test_the_supervisor_loop_hook_is_a_queue_put(tmp_path):
    rec = recorder.Recorder(tmp_path, lambda: ("stopped", None))  # never started: nothing drains it
    t0 = time.perf_counter()
    for _ in range(10_000):
        rec.event("ready", "x" * 1000)
    assert time.perf_counter() - t0 < 1.0 and rec.dropped_events == 10_000 - recorder.EVENT_QUEUE_MAX


def _store_with_history(home, now: float) -> None:
    from backend.server import statefile

    store = recorder.Store(recorder.db_path(statefile.state_path().parent), 86400, 10**5)
    rows = _rows(24, now - 120)
    rows[3].update(http=json.dumps({"2xx": 5, "4xx": 2}), ttft=json.dumps({"0.1": 4, "0.5": 1}), finished=5.0,
                   running=3.0, gen_tps=42.0)
    rows[10].update(http=json.dumps({"5xx": 1}), preempt=2.0)
    for r in rows:
        store.add_sample(r)
    store.add_events([(now - 100, "failed", "exit code -9: unknown"), (now - 90, "restart", "pid 2")])
    store.close()


def test_history_json_csv_and_text(qhome, capsys):
    now = time.time()
    _store_with_history(qhome, now)
    assert main(["history", "--since", "1h", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    s = out["summary"]
    assert s["http_requests"] == {"2xx": 5, "4xx": 2, "5xx": 1} and s["http_errors"] == 3
    assert s["preemptions"] == 2 and s["requests_finished"] == 5 and s["running_max"] == 3
    assert s["ttft_p50_s"] == pytest.approx(0.1 * 2.5 / 4)
    assert [e["kind"] for e in out["events"]] == ["failed", "restart"] and len(out["bins"]) == 12
    assert main(["history", "--csv"]) == 0
    rows = list(csv.reader(io.StringIO(capsys.readouterr().out)))
    assert tuple(rows[0]) == history.CSV_COLUMNS and len(rows) == 1 + 24 + 2
    assert any(r[2] == "event:restart" for r in rows)
    assert main(["history", "--since", "10m"]) == 0
    text = capsys.readouterr().out
    assert "HTTP 2xx 5, 4xx 2, 5xx 1" in text and "restart: pid 2" in text
    assert all(len(line) <= 80 for line in text.splitlines()), text


@pytest.mark.parametrize("since", ["yesterday", "-1h", "0", ""])
def test_a_bad_since_is_one_line_and_exit_2(qhome, capsys, since):
    assert main(["history", f"--since={since}"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--since" in err


def test_no_store_yet_says_so(qhome, capsys):
    assert main(["history"]) == 0
    assert "no history" in capsys.readouterr().out
    assert main(["history", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["samples"] == []
