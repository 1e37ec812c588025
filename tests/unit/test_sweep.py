"""Concurrency sweep (backend/bench/sweep.py) against a FAKE server (httpx.MockTransport): NOT vLLM, it
schedules 4 sequences at a time and reports its queue and KV use on /metrics as a vLLM does, so the
per-level peaks can be checked; the real demo server is swept in test_e2e_sweep.py."""

import csv
import io
import json

import httpx
import pytest

from backend.bench import sweep
from backend.bench.loadtest import BenchInputError
from backend.settings import load
from tests.helpers.sweep import FakeScheduler


def test_levels_parse_and_bad_ones_say_why():
    assert sweep.parse_levels("1,4, 8,16,32") == [1, 4, 8, 16, 32]
    assert sweep.parse_levels("2,2,1") == [2, 1]
    for bad in ("", "0", "1,x", "-3", "1,99999"):
        with pytest.raises(BenchInputError, match="sweep"):
            sweep.parse_levels(bad)


async def test_one_row_per_level_with_the_servers_own_peaks(qhome, repo_config):
    s = load(config=str(repo_config), overrides=["server.max_num_seqs=4"])
    fake = FakeScheduler(seqs=4)
    events = []
    plan = {"max_concurrency": 3.0, "kv_cache_tokens": 3 * 8192, "decode_tokens_per_s_ceiling": 1e9}
    res = await sweep.run_sweep(s, sweep.SweepConfig([1, 8], input_tokens=30, output_tokens=40,
                                                     requests_per_level=8),
                                events.append, plan=plan, transport=httpx.MockTransport(fake), sample_s=0.01)
    rows = res["levels"]
    assert [r["concurrency"] for r in rows] == [1, 8] and not res.get("error")
    assert all(r["completed"] == 8 and r["failed"] == 0 for r in rows)
    assert fake.chats == 8 + 8 + 1  # one warm-up, before the first level only
    one, eight = rows
    for r in rows:
        assert r["ttft_ms"]["mean"] is not None and r["ttft_ms"]["p99"] is not None
        assert r["output_tokens_per_s"] > 0 and r["requests_per_s"] > 0 and r["per_request_tokens_per_s"]
    # at 1 in flight nothing waits; at 8 the fake runs 4 and queues 4
    assert one["queued"] is False and one["peak_waiting"] == 0 and one["peak_kv_cache_usage"] == pytest.approx(0.1)
    assert eight["queued"] is True and eight["peak_waiting"] >= 1 and eight["peak_kv_cache_usage"] == pytest.approx(0.4)
    assert one["above_max_concurrency"] is False and eight["above_max_concurrency"] is True
    assert any("max_num_seqs" in n for n in eight["notes"])
    progress = [e for e in events if isinstance(e, sweep.LevelProgress)]
    assert {p.concurrency for p in progress} == {1, 8} and max(p.in_flight for p in progress if p.concurrency == 8) == 8
    assert [e["concurrency"] for e in events if isinstance(e, dict)] == [1, 8]
    assert res["settings"]["server"]["max_num_seqs"] == 4 and "api_key" not in res["settings"]["server"]


async def test_no_server_ends_the_sweep_with_the_fix(qhome, repo_config):
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    s = load(config=str(repo_config), overrides=[f"server.port={port}"])
    res = await sweep.run_sweep(s, sweep.SweepConfig([1, 2, 4], output_tokens=4))
    assert len(res["levels"]) == 1 and "cannot connect" in res["error"] and res["fix"]
    assert res["levels"][0]["completed"] == 0 and res["levels"][0]["peak_kv_cache_usage"] is None


def test_cli_saves_json_and_csv_and_shows_the_previous_sweep(qhome, repo_config, tmp_path, monkeypatch):
    fake = FakeScheduler()
    real = sweep.run_sweep

    async def faked(settings, cfg, on_event=None, **kw):
        kw["transport"] = httpx.MockTransport(fake)
        return await real(settings, cfg, on_event, **kw, sample_s=0.01)

    monkeypatch.setattr(sweep, "run_sweep", faked)
    s = load(config=str(repo_config), profile="chat")
    cfg = sweep.SweepConfig([1, 2], input_tokens=30, output_tokens=8, requests_per_level=4)
    out, err = io.StringIO(), io.StringIO()
    assert sweep.run_cli(s, cfg, False, csv_path=str(tmp_path / "t.csv"), out=out, err=err) == 0
    text = out.getvalue()
    assert "total tok/s" in text and "saved:" in text and "level 2/2" in err.getvalue()
    saved = sorted(sweep.sweeps_dir().glob("sweep-*"))
    assert [p.suffix for p in saved] == [".csv", ".json"]
    rows = list(csv.DictReader(open(tmp_path / "t.csv")))
    assert [r["concurrency"] for r in rows] == ["1", "2"] and rows[0]["profile"] == "chat"
    assert rows[0]["max_model_len"] == "8192" and rows[0]["output_tokens"] == "8"
    out = io.StringIO()
    assert sweep.run_cli(s, cfg, True, out=out, err=io.StringIO()) == 0
    res = json.loads(out.getvalue())
    assert len(res["levels"]) == 2 and res["previous"]["path"].endswith(".json")
    assert res["previous"]["levels"][0]["concurrency"] == 1 and res["saved"]["csv"].endswith(".csv")
    assert res["settings"]["profile"] == "chat"


def test_bench_sweep_bad_levels_exit_2(qhome, repo_config, capsys):
    from backend.cli import main

    assert main(["--config", str(repo_config), "bench", "--sweep", "1,zero"]) == 2
    assert "is not a concurrency" in capsys.readouterr().err
    assert main(["--config", str(repo_config), "bench", "--sweep", "1", "--output-tokens", "0"]) == 2


def test_the_h200_sweeps_read_back_and_show_where_chat_queues():
    """The sweeps measured on the H200 (benchmarks/gpu_sweep.sh, vLLM 0.20.2, Qwen2.5-14B's shape)."""
    from tests.helpers import FIXTURES

    folder = FIXTURES / "gpu" / "h200-sweeps"
    chat = json.loads((folder / "sweep-chat.json").read_text())
    batch = json.loads((folder / "sweep-batch.json").read_text())
    assert [r["concurrency"] for r in chat["levels"]] == [1, 4, 8, 16, 32]
    assert chat["settings"]["profile"] == "chat" and chat["settings"]["server"]["max_num_seqs"] == 8
    queued = {r["concurrency"]: r["queued"] for r in chat["levels"]}
    assert queued == {1: False, 4: False, 8: False, 16: True, 32: True}  # beyond max_num_seqs 8
    assert all(r["queued"] is False for r in batch["levels"])  # 32 seqs: nothing waits
    lines = sweep.table_lines(chat)
    assert len([x for x in lines if x.strip().split(" ")[0].rstrip("*").isdigit()]) == 5
    assert "162 tok/s" in lines[-1]
    rows = list(csv.DictReader(io.StringIO(sweep.csv_text(batch))))
    assert rows[-1]["concurrency"] == "32" and rows[-1]["profile"] == "batch"


def test_the_h200_long_profile_served_32k_as_planned():
    from tests.helpers import FIXTURES

    folder = FIXTURES / "gpu" / "h200-sweeps"
    run = json.loads((folder / "sweep-long.json").read_text())
    plan = json.loads((folder / "plan-long.json").read_text())
    assert plan["max_model_len"] == run["predicted"]["max_model_len"] == 32768
    assert abs(plan["kv_cache_tokens"] - run["predicted"]["kv_cache_tokens"]) / plan["kv_cache_tokens"] < 0.01
    assert [r["queued"] for r in run["levels"]] == [False, False, True]  # 2 sequences at a time


def test_a_level_is_burst_only_when_most_of_its_requests_are():
    """Issue 28: every row said "burst" at concurrency 1 (109.5 tok/s): a pooled ITL p50 near 0 came
    from tokens in pairs. The rate stands unless most requests had no measurable gaps."""
    from backend.bench.sweep import level_row

    rep = {"completed": 4, "requests": 4, "output_tokens": 256, "itl_ms": {"p50": 0.02},
           "ttft_ms": {"mean": 20.0, "p50": 19.0, "p99": 30.0},
           "decode_tokens_per_s_per_request": {"p50": 109.5}, "burst_requests": 1}
    row = level_row(rep, 1, {}, None, None)
    assert not row["burst"] and row["per_request_tokens_per_s"] == 109.5
    row = level_row(dict(rep, burst_requests=3), 1, {}, None, None)
    assert row["burst"] and row["per_request_tokens_per_s"] is None


def test_peaks_from_samples_that_never_saw_a_request_running_are_unknown_not_zero():
    s = sweep.ServerSampler(None, "http://x")  # type: ignore[arg-type]
    s.samples, s.peak_running, s.peak_kv, s.peak_waiting = 3, 0.0, 0.0, 0.0
    f = s.figures()
    assert f["peak_kv_cache_usage"] is None and f["queued"] is None and f["peak_waiting"] is None
    assert "none of 3 /metrics samples" in f["metrics_error"]
    s.peak_running, s.peak_kv = 1.0, 6.089e-05  # one request in a 1.7M-token cache: a sliver, not 0
    f = s.figures()
    assert f["peak_kv_cache_usage"] == pytest.approx(6.089e-05) and f["metrics_error"] is None
    assert sweep.kv_percent(f["peak_kv_cache_usage"], "n/a") == "<1 %"
    assert sweep.kv_percent(0.0, "n/a") == "0 %" and sweep.kv_percent(0.42, "n/a") == "42 %"
    assert sweep.kv_percent(None, "–") == "–"
