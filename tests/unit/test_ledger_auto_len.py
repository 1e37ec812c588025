"""server.max_model_len = "auto": passed to vLLM as its own `auto` (>= 0.20), refused before with the version
needed, and the plan says what vLLM's auto-fit will pick (the longest length whose blocks fit, the model's own at
most; 0.32 holds back one null block, 0.20.2 does not: vllm/v1/core/kv_cache_utils.py of each)."""

from __future__ import annotations

import pytest

from backend.errors import ConfigError
from backend.ledger import Card, PlanParams, lookup, plan
from backend.server.launch import check_flags
from backend.settings import load

H200 = Card("NVIDIA H200", 150754820096, memory_reserved_bytes=644939776, source="nvml")
Q14 = lookup("Qwen/Qwen2.5-14B-Instruct")


def settings(tmp_path, *sets: str):
    (tmp_path / "c.toml").write_text("")
    return load(str(tmp_path / "c.toml"), overrides=list(sets))


def test_auto_picks_what_the_kv_cache_holds() -> None:
    small = plan(Q14, PlanParams(gpu_memory_utilization=0.22, max_num_seqs=16, vllm_version="0.20.2",
                                 compile_cache="warm", auto_max_model_len=True), [H200])
    assert small.max_model_len_auto and small.max_model_len == small.num_blocks * 16  # no null block in 0.20.2
    assert small.max_model_len < 32768 and small.fits
    assert any("vLLM will pick" in n for n in small.notes)
    new = plan(Q14, PlanParams(gpu_memory_utilization=0.22, max_num_seqs=16, vllm_version="0.32.0",
                               compile_cache="warm", auto_max_model_len=True), [H200])
    assert new.max_model_len == (new.num_blocks - 1) * 16
    big = plan(Q14, PlanParams(gpu_memory_utilization=0.9, vllm_version="0.20.2", auto_max_model_len=True), [H200])
    assert big.max_model_len == 32768  # the model's own: everything fits
    none = plan(Q14, PlanParams(gpu_memory_utilization=0.1, vllm_version="0.20.2", auto_max_model_len=True), [H200])
    assert any("cannot fit any length" in n for n in none.notes)


def test_auto_in_settings_and_refused_by_old_vllm(tmp_path) -> None:
    s = settings(tmp_path, "server.max_model_len=auto")
    assert s.server["max_model_len"] == "auto"
    assert check_flags(s, (0, 20, 2)) == [] and check_flags(s, (0, 32, 0)) == []
    (problem,) = check_flags(s, (0, 19, 1))
    assert "needs vLLM >= 0.20" in problem
    with pytest.raises(ConfigError, match='must be an integer \\(tokens\\) or "auto"'):
        settings(tmp_path, "server.max_model_len=lots")
    assert settings(tmp_path, "server.max_model_len=4096").server["max_model_len"] == 4096
