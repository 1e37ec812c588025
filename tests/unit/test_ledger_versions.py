"""vLLM's KV accounting per version range (backend/ledger/versions.py): the table, the plan following it, and
the JSON/text saying which range was used. The figures each rule changes are compared between two versions on
either side of its boundary, so a range put at the wrong version fails here."""

from __future__ import annotations

import importlib.util
import io
import json
from dataclasses import replace

import pytest

from backend.ledger import Card, PlanParams, lookup, overheads, plan, versions
from tests.helpers import FIXTURES, ROOT

GiB = 1 << 30
Q7 = lookup("Qwen/Qwen2.5-7B-Instruct")
L4 = Card("NVIDIA L40S", int(46 * GiB), memory_reserved_bytes=int(0.5 * GiB), source="nvml")
P = PlanParams(model="Qwen/Qwen2.5-7B-Instruct", gpu_memory_utilization=0.9, max_model_len=8192, max_num_seqs=64)
READ = ["0.5.5", "0.6.3.post1", "0.6.4.post1", "0.6.6.post1", "0.7.0", "0.7.3", "0.8.0", "0.8.5.post1", "0.9.0",
        "0.9.2", "0.10.2", "0.11.0", "0.13.0", "0.16.0", "0.18.0", "0.19.1", "0.20.2", "0.24.0", "0.28.0", "0.33.0"]


def _plan(version: str, **kw):  # type: ignore[no-untyped-def]
    card = kw.pop("card", L4)
    return plan(Q7, replace(P, vllm_version=version, **kw), [card])


def test_ranges_are_contiguous_per_engine_and_cite_vllm_files() -> None:
    for engine in ("v0", "v1"):
        rs = [r for r in versions.RANGES if r.engine == engine]
        assert rs[-1].hi is None or engine == "v0"
        for a, b in zip(rs, rs[1:], strict=False):
            assert a.hi == b.lo, (a.id, b.id)
    for r in versions.RANGES:
        assert r.sources and all(s.startswith("vllm/") and "@v0." in s for s in r.sources), r.id
    ids = [r.id for r in versions.RANGES]
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize("v", READ)
def test_every_read_version_has_one_range(v: str) -> None:
    beh = overheads.behaviour(v)
    assert [r.id for r in versions.RANGES if r.engine == beh.engine and r.holds(beh.version)] == [beh.range_id]


@pytest.mark.parametrize("before,after,counted_after", [
    ("0.6.3", "0.6.4", True),  # worker.py@v0.6.4.post1: total - free holds the context
    ("0.6.4", "0.6.5", False),  # worker.py@v0.6.5: memory_profiling's baseline holds it again
    ("0.9.0", "0.9.2", False),  # V1: gpu_worker.py@v0.9.2 init_snapshot
])
def test_cuda_context_counted_where_the_source_measures_total_minus_free(before: str, after: str,
                                                                          counted_after: bool) -> None:
    a, b = _plan(before), _plan(after)
    assert (b.cuda_context_bytes > 0) is counted_after
    assert (a.cuda_context_bytes > 0) is not counted_after
    ctx = int(overheads.CUDA_CONTEXT_GIB * GiB)
    diff = a.kv_available_bytes_per_gpu - b.kv_available_bytes_per_gpu
    # the context is the only accounting difference across these boundaries (activation aside, same engine)
    if a.activation_bytes == b.activation_bytes and a.cuda_graph_bytes == b.cuda_graph_bytes:
        assert abs(abs(diff) - ctx) <= ctx * 0.01 + abs(a.non_torch_bytes - a.cuda_context_bytes
                                                         - b.non_torch_bytes + b.cuda_context_bytes)


def test_cuda_graphs_taken_off_from_0_20_and_by_the_switch_from_0_18() -> None:
    old, new = _plan("0.19.1"), _plan("0.20.2", compile_cache="warm")
    assert not old.cuda_graphs_subtracted and new.cuda_graphs_subtracted
    on = _plan("0.19.1", env={"VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS": "1"})
    assert on.cuda_graphs_subtracted
    assert on.kv_available_bytes_per_gpu == old.kv_available_bytes_per_gpu - on.cuda_graph_bytes
    assert not _plan("0.17.0", env={"VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS": "1"}).cuda_graphs_subtracted
    assert not _plan("0.20.2", env={"VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS": "0"}).cuda_graphs_subtracted


def test_tokens_from_the_concurrency_from_0_20() -> None:
    # 8,200 is not a multiple of 16: 0.20.2 prints int(blocks / ceil(8200/16) x 8200), 0.19.1 blocks x 16
    old, new = _plan("0.19.1", max_model_len=8200), _plan("0.20.2", max_model_len=8200)
    assert old.kv_cache_tokens == old.num_blocks * 16
    assert new.kv_cache_tokens == int(new.num_blocks / 513 * 8200) < new.num_blocks * 16


@pytest.mark.parametrize("card,version,batched", [
    ("NVIDIA H100 80GB HBM3", "0.8.0", 2048), ("NVIDIA H100 80GB HBM3", "0.8.5", 8192),
    ("NVIDIA A100-SXM4-80GB", "0.8.5", 8192), ("NVIDIA A100-SXM4-80GB", "0.9.2", 2048),
])
def test_large_card_defaults_by_version(card: str, version: str, batched: int) -> None:
    c = Card(card, int(80 * GiB), source="nvml")
    assert plan(Q7, replace(P, vllm_version=version, max_num_seqs=None), [c]).max_num_batched_tokens == batched


def test_free_memory_below_the_request_refuses_only_where_vllm_checks() -> None:
    low = replace(L4, memory_free_bytes=int(30 * GiB))
    strict = [p for p in _plan("0.9.2", card=low).problems if p.kind == "free-memory-too-low"]
    loose = [p for p in _plan("0.7.3", card=low, env={"VLLM_USE_V1": "0"}).problems
             if p.kind == "free-memory-too-low"]
    assert strict and strict[0].severity == "error"
    assert loose and loose[0].severity == "warning"


def test_other_processes_counted_by_the_total_minus_free_ranges() -> None:
    busy = replace(L4, memory_free_bytes=int(L4.memory_total_bytes - 0.5 * GiB - 2 * GiB))
    for v, counted in (("0.8.5", True), ("0.9.2", False)):
        idle, shared = _plan(v), _plan(v, card=busy)
        drop = idle.kv_available_bytes_per_gpu - shared.kv_available_bytes_per_gpu
        assert (abs(drop - 2 * GiB) < 0.01 * GiB) is counted, v


def test_plan_json_and_text_name_the_range(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from backend.ledger.cli import format_table

    led = _plan("0.13.0")
    d = led.to_dict()
    r = d["vllm_range"]
    assert r["id"] == "v1-profiler" and r["from"] == "0.9.2" and r["before"] == "0.18.0"
    assert r["version"] == "0.13.0" and r["version_from"] == "given"
    assert "CUDA total" in r["terms"]["budget"] and r["sources"]
    assert d["device_model"]["range"].endswith("(v1-profiler)")  # the older field kept, with the range
    for key in ("kv_cache_tokens", "basis", "device_model", "overheads_gib_per_gpu"):
        assert key in d
    assert "vLLM accounting: V1 0.9.2 < 0.18.0 (v1-profiler" in format_table(led)
    assumed = plan(Q7, P, [L4]).to_dict()["vllm_range"]
    assert assumed["version_from"].startswith("assumed") and assumed["id"] == "v1-consumed"


def test_plan_cli_says_installed_version(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from backend.ledger import cli
    from backend.settings import load

    (tmp_path / "c.toml").write_text("")
    s = load(str(tmp_path / "c.toml"), overrides=["server.model=Qwen/Qwen2.5-7B-Instruct",
                                                   "planner.gpu_memory_gib=48"])
    monkeypatch.setattr(cli, "detect_vllm_version", lambda settings: "0.8.5.post1")
    monkeypatch.setenv("QWEN_TUI_HOME", str(tmp_path / "home"))
    buf = io.StringIO()
    cli.run_plan(s, True, buf, gpus=[])
    out = json.loads(buf.getvalue())
    assert out["vllm_range"]["id"] == "v1-total-minus-free" and out["vllm_range"]["version_from"] == "installed"


def _bench():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("bench_ledger_versions",
                                                  ROOT / "benchmarks" / "bench_ledger_versions.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_bench_on_missing_or_empty_dir(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    b = _bench()
    assert b.main([str(tmp_path / "nope")]) == 2
    assert "missing" in capsys.readouterr().err
    assert b.main([str(tmp_path)]) == 2
    assert "empty" in capsys.readouterr().err


def test_bench_plans_a_typed_log(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    src = (FIXTURES / "backsolve" / "v0.7.3-v0-memory-profiling.log").read_text()
    (tmp_path / "a.log").write_text("# model: meta-llama/Llama-3.1-8B-Instruct\n" + src)
    b = _bench()
    assert b.main([str(tmp_path), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows[0]["range"] == "v0-profiler" and rows[0]["vllm"] == 2488 * 16
    assert rows[0]["error_pct"] is not None
