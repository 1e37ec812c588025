"""Back-solving vLLM's memory terms from logs that print no breakdown line (backend/logparse/backsolve.py), on
short typed logs in tests/fixtures/backsolve/ (one per line format: V0 0.6.4, V0 0.6.6-0.10, V1 INFO)."""

from __future__ import annotations

import io
import json

import pytest

from backend.logparse import LogParser
from backend.logparse.backsolve import backsolve, graphs_in_budget
from backend.logparse.cli import run_parse_log
from tests.helpers import FIXTURES

LOGS = FIXTURES / "backsolve"


def _parse(name: str) -> LogParser:
    p = LogParser()
    for line in (LOGS / name).read_text().splitlines():
        p.feed(line)
    p.end_of_log()
    return p


def _json(name: str) -> dict:  # type: ignore[type-arg]
    out = io.StringIO()
    assert run_parse_log(str(LOGS / name), True, out) == 0
    return json.loads(out.getvalue())  # type: ignore[no-any-return]


def test_v0_profiling_lines_give_every_term() -> None:
    t = _json("v0.7.3-v0-memory-profiling.log")["backsolved"]["0"]
    assert t["total_gib"] == 23.58 and t["requested_gib"] == 21.22  # "= 21.22GiB", read, not computed
    assert (t["weights_gib"], t["non_torch_gib"], t["activation_peak_gib"], t["kv_cache_gib"]) == (
        14.9888, 0.12, 1.25, 4.86)
    assert t["non_kv_gib"] == pytest.approx(21.22 - 4.86)
    assert "requested_gib" not in t["derived"] and "non_kv_gib" in t["derived"]
    assert t["cuda_graph_gib"] == 0.31  # captured after the KV cache: reported, not in the budget


def test_v0_6_4_results_line_splits_the_torch_peak() -> None:
    t = _json("v0.6.4-v0-profiling-results.log")["backsolved"]["0"]
    assert t["requested_gib"] == pytest.approx(23.58 * 0.90, abs=0.01)
    assert t["activation_peak_gib"] == pytest.approx(17.06 - 14.9888, abs=0.01)  # peak_torch less the weights
    assert t["non_torch_gib"] == 0.35 and "activation_peak_gib" in t["derived"]
    # the terms add up to what vLLM printed for the KV cache
    assert t["requested_gib"] - t["weights_gib"] - t["activation_peak_gib"] - t["non_torch_gib"] == pytest.approx(
        t["kv_cache_gib"], abs=0.03)


def test_v1_info_log_needs_the_cuda_total() -> None:
    d = _json("v0.13.0-v1-info-no-breakdown.log")
    assert d["breakdown"] == {}
    t = d["backsolved"]["0"]
    assert "requested_gib" not in t and t["weights_gib"] == 14.25 and t["kv_cache_gib"] == 4.52
    p = _parse("v0.13.0-v1-info-no-breakdown.log")
    given = backsolve(p.rank_figures, p.figures, p.info, total_gib=23.56, version="0.13.0")["0"]
    assert given["requested_gib"] == round(23.56 * 0.85, 2)
    # 0.13 captures graphs after the KV cache: none of the 0.45 GiB is in the non-KV figure
    assert given["activation_and_non_torch_gib"] == pytest.approx(given["requested_gib"] - 4.52 - 14.25, abs=0.01)


def test_graph_estimate_in_budget_from_0_20() -> None:
    assert not graphs_in_budget("0.19.1") and graphs_in_budget("0.20.2") and graphs_in_budget("0.33.0")
    assert not graphs_in_budget(None)
    rf = {"kv_cache_gib": {0: 10.0}, "weights_gib": {0: 5.0}}
    figs = {"cuda_graph_estimate_gib": 0.5}
    new = backsolve(rf, figs, {"gpu_memory_utilization": 0.5}, total_gib=40.0, version="0.20.2")["0"]
    old = backsolve(rf, figs, {"gpu_memory_utilization": 0.5}, total_gib=40.0, version="0.19.1")["0"]
    assert new["activation_and_non_torch_gib"] == pytest.approx(old["activation_and_non_torch_gib"] - 0.5)


def test_learned_record_names_back_solved_terms(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from backend.ledger import learned

    log = tmp_path / "vllm-1.log"
    log.write_text((LOGS / "v0.13.0-v1-info-no-breakdown.log").read_text())
    rec = learned.measure_log(log)
    assert rec is not None and rec["backsolved"]["0"]["weights_gib"] == 14.25
    terms = learned.measured_terms(rec)
    assert "weights (back-solved from the log's lines)" in terms


def test_v0_profiling_terms_reach_the_plan_comparison() -> None:
    from backend.ledger import compare, lookup, plan
    from backend.ledger.types import Card, PlanParams

    d = _json("v0.7.3-v0-memory-profiling.log")
    led = plan(lookup("meta-llama/Llama-3.1-8B-Instruct"),
               PlanParams(gpu_memory_utilization=0.9, max_model_len=16384, vllm_version="0.7.3"),
               [Card("GPU", int(23.58 * (1 << 30)), memory_reserved_bytes=0)])
    rows = {r["name"]: r for r in compare(led.to_dict(), d)}
    assert rows["rank 0 requested GiB"]["actual"] == 21.22
    assert rows["rank 0 weights + non-torch GiB"]["actual"] == pytest.approx(14.9888 + 0.12, abs=0.01)
    assert rows["rank 0 activation peak GiB"]["actual"] == 1.25
