"""The ledger's learning loop on the real vLLM CPU build (issue 27): plan, launch the demo, change three settings
(utilization, max_model_len, max_num_seqs), plan, launch: the second plan says it was measured on this box and
is within 1 % of vLLM's KV tokens. Two launches (minutes); benchmarks/bench_ledger_learn.py --demo is the same
loop as a report."""

from __future__ import annotations

import importlib.util

import pytest

from tests.helpers import ROOT

_spec = importlib.util.spec_from_file_location("bench_ledger_learn", ROOT / "benchmarks" / "bench_ledger_learn.py")
assert _spec is not None and _spec.loader is not None
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)

pytestmark = pytest.mark.e2e


def test_after_one_launch_the_next_plan_is_within_1_percent(tmp_path, vllm_lock):
    from backend.server import procs

    assert not procs.find_vllm_processes(), "vLLM processes are already running on this machine"
    first, second = bench.demo_loop(tmp_path / "home")
    print(first, second, sep="\n")
    assert first["basis"] == "modelled" and first["vllm_tokens"] > 0
    assert second["basis"].startswith("measured on this box at ") and "1 launch" in second["basis"]
    assert abs(second["err_pct"]) <= 1.0, second
    assert not procs.find_vllm_processes()
