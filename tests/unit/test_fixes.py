"""backend.fixes: each diagnosis whose fix is a settings change, as data, with the ledger's verdict,
where the value comes from, and the save into the user's file (comments kept)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from backend import fixes
from backend.fixes import Change, Facts
from backend.logparse.parser import parse_lines
from backend.settings import load

ROOT = Path(__file__).resolve().parents[1]
LOGS = ROOT / "fixtures" / "vllm-logs"
H200 = "[planner]\ngpu_name = \"NVIDIA H200\"\ngpu_memory_gib = 139.8\ngpu_count = 1\n"


def failure_of(name: str) -> dict:
    return parse_lines((LOGS / name).read_text(errors="replace").splitlines()).snapshot()["failure"]


def config(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "config.toml"
    p.write_text(text)
    return p


def settings_of(tmp_path: Path, text: str, **kw):
    return load(config=str(config(tmp_path, text)), **kw)


def fits(ok: bool = True, mml: int = 10**6, problem: str = "weights need more"):
    """A stand-in ledger: the same answer for every settings."""
    led = SimpleNamespace(fits=ok, kv_cache_tokens=mml, max_concurrency=3.0, max_model_len_that_fits=mml,
                          problems=[] if ok else [SimpleNamespace(severity="error", message=problem)])
    return Facts(ledger=lambda s: led)


@pytest.fixture
def fake_demo_model(tmp_path, monkeypatch):
    from backend import demo

    monkeypatch.setattr(demo, "ensure_model", lambda: tmp_path / "demo-model")


SMALL = '[server]\nmodel = "Qwen/Qwen2.5-0.5B-Instruct"\n'


# -- each kind as data -----------------------------------------------------------------------------
def test_kv_too_small_v0_sets_max_model_len_to_the_kv_capacity_and_the_real_ledger_says_it_fits(tmp_path):
    f = failure_of("v0.6.4-rtx3090-llama3.1-8b-tp1-kv-maxlen-fail.log")
    assert f["kind"] == "kv_cache_too_small"
    s = settings_of(tmp_path, SMALL + "max_model_len = 32768\n")
    prop = fixes.propose(f, s)
    assert [c.to_dict()["diff"] for c in prop.changes] == ["server.max_model_len: 32768 -> 23648"]
    assert prop.verdict["fits"] is True and "the ledger says it fits" in prop.verdict["text"]
    assert prop.applicable and prop.target == str(tmp_path / "config.toml")


def test_kv_too_small_v1_takes_vllms_estimate():
    msg = ("ValueError: To serve at least one request with the models's max seq len (2048), (0.03 GiB KV cache) is "
           "needed, which is larger than the available KV cache memory (0.0 GiB). Based on the available memory, "
           "the estimated maximum model length is 1008. Try increasing `gpu_memory_utilization`")
    s = load(overrides=["server.model=Qwen/Qwen2.5-0.5B-Instruct", "server.max_model_len=2048"])
    prop = fixes.propose({"kind": "kv_cache_too_small", "message": msg}, s, fits())
    assert prop.changes == [Change("server", "max_model_len", 1008, 2048)]
    assert "vLLM estimated 1,008 tokens" in prop.why


def test_kv_fix_takes_the_ledgers_lower_capacity_and_never_one_the_ledger_fails(tmp_path):
    f = failure_of("v0.6.4-rtx3090-llama3.1-8b-tp1-kv-maxlen-fail.log")
    s = settings_of(tmp_path, SMALL)
    prop = fixes.propose(f, s, fits(True, mml=20000))
    assert prop.changes[0].value == 20000 and prop.applicable and "fewer tokens" in prop.notes[0]
    prop = fixes.propose(f, s, fits(False, problem="weights need 27.5 GiB"))
    assert not prop.applicable and prop.blocked == "the ledger says it fails too: weights need 27.5 GiB"


def test_no_cache_memory_on_the_h200_is_the_lowest_utilization_the_ledger_fits(tmp_path):
    f = failure_of("v0.20.2-h200-qwen2.5-14b-shape-tp1-util0.17-no-cache-memory-fail.log")
    assert f["kind"] == "no_cache_memory"
    s = settings_of(tmp_path, '[server]\nmodel = "Qwen/Qwen2.5-14B-Instruct"\ngpu_memory_utilization = 0.17\n'
                    "max_model_len = 8192\n" + H200)
    prop = fixes.propose(f, s)
    new = prop.changes[0].value
    assert prop.changes[0].key == "gpu_memory_utilization" and 0.17 < new <= fixes.UTIL_CAP
    assert prop.verdict["fits"] is True and prop.applicable
    from backend.ledger import plan_from_settings

    lowest = round(new - fixes.UTIL_MARGIN, 2)  # the lowest that fits, and 2 points more
    assert plan_from_settings(fixes._with(s, [Change("server", "gpu_memory_utilization", lowest)]),
                              check_free=False).fits
    below = fixes._with(s, [Change("server", "gpu_memory_utilization", round(lowest - 0.01, 2))])
    assert not plan_from_settings(below, check_free=False).fits
    assert f"the ledger fits it from {lowest:g}" in prop.why


def test_no_cache_memory_on_the_cpu_build_raises_utilization_past_the_workers_own_memory():
    msg = ("ValueError: Available memory on node 0 (20.12/23.35 GiB) on kv cache allocation is less than requested "
           "memory for kv (-0.22/0.47 GiB). Reduce CPU memory used by other processes.")
    lines = [f"(EngineCore pid=1) ERROR 11-29 08:30:04 [core.py:1] {x}" for x in
             ("EngineCore failed to start.", "Traceback (most recent call last):", msg)]
    f = parse_lines(lines).snapshot()["failure"]
    assert f["kind"] == "no_cache_memory" and "raise server.gpu_memory_utilization to 0.05" in f["fix"]
    s = load(overrides=["server.gpu_memory_utilization=0.02", "planner.device=cpu"])
    prop = fixes.propose(f, s, fits())
    # the worker holds 0.69 GiB, 0.35 GiB more for the KV cache, of 23.35 GiB: 0.045 -> 0.05, plus 2 points
    assert prop.changes == [Change("server", "gpu_memory_utilization", 0.07, 0.02)]


def test_cpu_memory_lowers_utilization_to_what_is_free():
    msg = ("ValueError: Available memory on node 0 (7.57/9.21 GiB) on startup is less than desired CPU memory "
           "utilization (0.92, 8.48 GiB)")
    s = load(overrides=["planner.device=cpu"])
    prop = fixes.propose({"kind": "cpu_memory", "message": msg}, s, fits())
    assert prop.changes[0].value == 0.8 and "7.57 of 9.21 GiB of RAM" in prop.why


def test_nccl_p2p_is_a_server_env_entry():
    f = failure_of("v0.8.1-v1-deepseek-r1-distill-qwen-7b-tp-allgather-fail.log")
    assert f["kind"] == "nccl_p2p"
    prop = fixes.propose(f, load(), fits())
    assert prop.changes == [Change("server.env", "NCCL_P2P_DISABLE", "1", None)]
    assert prop.to_dict()["diff"] == ['server.env.NCCL_P2P_DISABLE: (unset) -> "1"']


def test_port_in_use_takes_the_next_free_port():
    busy = {8001}
    facts = Facts(bind=lambda host, port: OSError(98, "in use") if port in busy else None,
                  ledger=fits().ledger)
    prop = fixes.propose({"kind": "port_in_use", "message": "address already in use"}, load(), facts)
    assert prop.changes == [Change("server", "port", 8002, 8000)]


def test_max_len_over_the_model_takes_the_models_length():
    f = failure_of("v0.32.0-cpu-max-len-exceeds-model.log")
    prop = fixes.propose(f, load(overrides=["server.max_model_len=8192"]), fits())
    assert prop.changes == [Change("server", "max_model_len", 4096, 8192)]


def test_numa_binding_gives_each_rank_its_cores():
    assert fixes.cpu_binding(2, [0, 1]) == "0|1"
    assert fixes.cpu_binding(2, [0, 1, 2, 3, 4, 5, 6, 7]) == "0-3|4-7"
    assert fixes.cpu_binding(3, [0, 1]) is None


def test_the_cpu_builds_binding_failure_gets_one_core_group_per_rank():
    import os

    cores = sorted(os.sched_getaffinity(0))
    msg = ("AssertionError: Not enough allowed NUMA nodes to bind threads of 2 local CPUWorkers. Allowed NUMA nodes "
           "are [0]. Please try to bind threads manually or decrease DP/TP/PP.")
    s = load(overrides=["server.tensor_parallel_size=2", "planner.device=cpu"])
    for kind in ("cpu_binding", "numa_binding"):  # issue 25's kind, by either name
        prop = fixes.propose({"kind": kind, "message": msg}, s, fits())
        if len(cores) < 2:
            assert prop is None
            continue
        (c,) = prop.changes
        assert (c.section, c.key) == ("server.env", "VLLM_CPU_OMP_THREADS_BIND")
        assert c.value.count("|") == 1 and str(cores[0]) in c.value.split("|")[0]


def test_kinds_without_a_settings_change_have_no_fix():
    assert fixes.propose({"kind": "weights_incomplete", "message": "x"}, load(), fits()) is None
    assert fixes.propose({"kind": "kv_cache_too_small", "message": "no numbers"}, load(), fits()) is None
    assert fixes.propose(None, load()) is None


# -- where the value comes from ------------------------------------------------------------------------
def test_a_value_from_set_or_a_profile_says_what_to_change_instead(tmp_path):
    f = failure_of("v0.6.4-rtx3090-llama3.1-8b-tp1-kv-maxlen-fail.log")
    s = settings_of(tmp_path, SMALL, overrides=["server.max_model_len=32768"])
    prop = fixes.propose(f, s, fits())
    assert not prop.applicable
    assert prop.blocked.startswith("server.max_model_len comes from `--set server.max_model_len=32768`")
    assert "--set server.max_model_len=23648" in prop.blocked
    s = settings_of(tmp_path, SMALL, profile="long")
    prop = fixes.propose(f, s, fits())
    assert "profile 'long'" in prop.blocked and "[profiles.long]" in prop.blocked
    s = settings_of(tmp_path, SMALL, overrides=["server.env.NCCL_P2P_DISABLE=0"])
    prop = fixes.propose({"kind": "nccl_p2p", "message": "NCCL error"}, s, fits())
    assert "--set server.env.NCCL_P2P_DISABLE=0" in prop.blocked


def test_under_demo_the_file_is_not_used_so_the_fix_says_set(fake_demo_model):
    prop = fixes.propose({"kind": "nccl_p2p", "message": "NCCL error"}, load(demo=True), fits())
    assert "--demo's" in prop.blocked and "--set server.env.NCCL_P2P_DISABLE=\"1\"" in prop.blocked


def test_a_fix_that_changes_nothing_is_not_offered():
    s = load(overrides=["server.env.NCCL_P2P_DISABLE=1"])
    prop = fixes.propose({"kind": "nccl_p2p", "message": "NCCL error"}, s, fits())
    assert not prop.applicable and "already have this value" in prop.blocked


# -- the save --------------------------------------------------------------------------------------------
def test_apply_saves_into_the_file_keeping_comments_and_other_env_entries(tmp_path):
    path = config(tmp_path, SMALL + "max_model_len = 32768  # long prompts\n\n"
                  '[server.env]\n# keep me\nHF_HUB_OFFLINE = "1"\n')
    s = load(config=str(path))
    prop = fixes.propose(failure_of("v0.6.4-rtx3090-llama3.1-8b-tp1-kv-maxlen-fail.log"), s, fits())
    saved, new = fixes.apply(prop, s)
    assert saved == path and new.server["max_model_len"] == 23648
    prop = fixes.propose({"kind": "nccl_p2p", "message": "NCCL error"}, new, fits())
    _, new = fixes.apply(prop, new)
    text = path.read_text()
    assert "# long prompts" in text and "# keep me" in text
    assert new.env == {"HF_HUB_OFFLINE": "1", "NCCL_P2P_DISABLE": "1"}


def test_a_blocked_fix_is_never_applied(tmp_path):
    path = config(tmp_path, SMALL)
    s = load(config=str(path))
    prop = fixes.propose(failure_of("v0.6.4-rtx3090-llama3.1-8b-tp1-kv-maxlen-fail.log"), s, fits(False))
    with pytest.raises(ValueError, match="not applied"):
        fixes.apply(prop, s)
    assert path.read_text() == SMALL


# -- before a launch: the ledger's blocking problems get the same fix ------------------------------
def _plan(s):
    from backend.ledger import plan_from_settings

    return plan_from_settings(s, check_free=False).to_dict()


def test_a_plan_whose_weights_exceed_the_budget_gets_the_utilization_the_ledger_fits(tmp_path):
    s = settings_of(tmp_path, '[server]\nmodel = "Qwen/Qwen2.5-14B-Instruct"\ngpu_memory_utilization = 0.1\n' + H200)
    plan = _plan(s)
    assert any(p["kind"] == "weights-exceed-budget" for p in plan["problems"])
    prop = fixes.propose_for_plan(plan, s)
    assert prop.kind == "no_cache_memory" and prop.changes[0].key == "gpu_memory_utilization"
    assert prop.changes[0].old == 0.1 and prop.verdict["fits"] is True and prop.applicable
    assert prop.why.startswith("the ledger says: ") and "weights" in prop.why  # the plan's problem, not a failure's
    # the same value as the failure banner's after a wasted start without a measured floor
    assert prop.changes[0].value == fixes.propose({"kind": "no_cache_memory", "message": ""}, s).changes[0].value
    assert _plan(fixes._with(s, prop.changes))["fits"]


def test_a_plan_whose_cache_cannot_hold_one_request_gets_the_longest_max_model_len_that_fits(tmp_path):
    s = settings_of(tmp_path, '[server]\nmodel = "Qwen/Qwen2.5-14B-Instruct"\ngpu_memory_utilization = 0.24\n'
                    "max_model_len = 32768\n" + H200)
    plan = _plan(s)
    assert [p["kind"] for p in plan["problems"] if p["severity"] == "error"] == ["kv-cache-too-small-for-max-model-len"]
    prop = fixes.propose_for_plan(plan, s)
    assert prop.changes[0].key == "max_model_len" and prop.changes[0].value == plan["max_model_len_that_fits"]
    assert 0 < prop.changes[0].value < 32768 and prop.verdict["fits"] is True


def test_a_plan_problem_no_setting_fixes_has_no_proposal(tmp_path):
    s = settings_of(tmp_path, SMALL)
    assert fixes.propose_for_plan({"problems": [{"kind": "tp-not-divisible", "severity": "error"}]}, s) is None
    assert fixes.propose_for_plan({"problems": [{"kind": "weights-exceed-budget", "severity": "warning"}]},
                                  s) is None  # a warning does not block the launch
    assert fixes.propose_for_plan(None, s) is None


def test_the_verdict_is_the_plan_of_this_box(tmp_path, monkeypatch) -> None:
    """The fix's verdict plans as `qwen-tui plan` does: with the installed vLLM's version (so the launches this box
    measured and the compile cache it left count) and the NVML cards, both read once per proposal."""
    from backend import ledger
    from backend.ledger import cli as ledger_cli

    seen: list[tuple] = []
    reads = {"gpus": 0, "version": 0}

    def probe():
        reads["gpus"] += 1
        return [{"name": "NVIDIA H200", "memory_total_bytes": 150_754_820_096, "cc": (9, 0)}]

    def version(settings):
        reads["version"] += 1
        return "0.20.2"

    monkeypatch.setattr(ledger_cli, "probe_gpus", probe)
    monkeypatch.setattr(ledger_cli, "detect_vllm_version", version)
    monkeypatch.setattr(ledger, "plan_from_settings",
                        lambda s, gpus=None, vllm_version=None, check_free=True:
                        seen.append((gpus, vllm_version, check_free)) or SimpleNamespace(fits=True))
    s = settings_of(tmp_path, '[server]\nmodel = "Qwen/Qwen2.5-14B-Instruct"\n')
    facts = Facts()
    facts.plan(s)
    facts.plan(s)
    assert [v for _, v, _ in seen] == ["0.20.2", "0.20.2"]
    assert seen[0][0][0]["name"] == "NVIDIA H200" and seen[0][2] is False
    assert reads == {"gpus": 1, "version": 1}
