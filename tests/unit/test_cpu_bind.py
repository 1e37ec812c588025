"""The CPU build's thread binding at TP>1 (backend/server/cpu_bind.py) and the demo's tp2 profile."""

from __future__ import annotations

import sys

import pytest

from backend.server import cpu_bind
from backend.server.launch import VllmInstall, build_launch
from backend.settings import load


@pytest.mark.parametrize("cores, ranks, want", [
    ([0, 1], 2, "0|1"),
    ([0, 1, 2, 3, 4, 5, 6, 7], 2, "0-3|4-7"),
    ([2, 3, 5], 2, "2|3"),          # a cpuset with a gap; the odd core stays free
    ([0, 1, 2, 3], 4, "0|1|2|3"),
])
def test_binding_gives_each_rank_the_same_number_of_cores(cores, ranks, want):
    assert cpu_bind.binding(cores, ranks) == want


def test_plan_binds_only_when_auto_binding_would_fail():
    tp2 = {"tensor_parallel_size": 2}
    assert cpu_bind.plan(tp2, {}, cores=[0, 1], nodes=1) == ({"VLLM_CPU_OMP_THREADS_BIND": "0|1"}, None)
    assert cpu_bind.plan(tp2, {}, cores=[0, 1], nodes=2) == ({}, None)  # a NUMA node per rank: vLLM's auto
    assert cpu_bind.plan({"tensor_parallel_size": 1}, {}, cores=[0], nodes=1) == ({}, None)
    assert cpu_bind.plan(tp2, {"VLLM_CPU_OMP_THREADS_BIND": "auto"}, cores=[0, 1], nodes=1) == ({}, None)
    pp = {"tensor_parallel_size": 2, "pipeline_parallel_size": 2}
    assert cpu_bind.plan(pp, {}, cores=[0, 1, 2, 3], nodes=1)[0] == {"VLLM_CPU_OMP_THREADS_BIND": "0|1|2|3"}


def test_fewer_cores_than_ranks_is_refused_with_what_to_change():
    env, problem = cpu_bind.plan({"tensor_parallel_size": 2}, {}, cores=[3], nodes=1)
    assert env == {} and problem is not None
    assert "may use 1 core (3)" in problem and "server.tensor_parallel_size = 1" in problem


def test_numa_nodes_counts_nodes_holding_our_cores(tmp_path):
    for i, cpus in enumerate(["0-1", "2-3", "4-5"]):
        (tmp_path / f"node{i}").mkdir()
        (tmp_path / f"node{i}" / "cpulist").write_text(cpus + "\n")
    assert cpu_bind.numa_nodes([0, 1, 2], tmp_path) == 2
    assert cpu_bind.numa_nodes([0, 1], tmp_path / "missing") == 1


def test_demo_tp2_profile_sets_two_ranks_and_the_binding(qhome, monkeypatch):
    monkeypatch.setattr(cpu_bind, "usable_cores", lambda: [0, 1])
    monkeypatch.setattr(cpu_bind, "numa_nodes", lambda cores, root=None: 1)
    s = load(demo=True, profile="tp2")
    assert s.server["tensor_parallel_size"] == 2
    launch = build_launch(s, VllmInstall("vllm-cpu", "0.32.0", sys.executable))
    assert launch.env["VLLM_CPU_OMP_THREADS_BIND"] == "0|1" and not launch.problems
    assert "--tensor-parallel-size" in launch.argv
    # the user's own binding in [server.env] wins, whatever it is
    s = load(demo=True, profile="tp2", overrides=["server.env.VLLM_CPU_OMP_THREADS_BIND=auto"])
    assert build_launch(s, VllmInstall("vllm-cpu", "0.32.0", sys.executable)).env["VLLM_CPU_OMP_THREADS_BIND"] == "auto"


def test_tp2_is_a_demo_profile_only(qhome, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert "tp2" not in load().profiles and "tp2" in load(demo=True).profiles


def test_one_core_box_refuses_the_tp2_demo_before_launch(qhome, monkeypatch, capsys):
    from backend.cli import main

    monkeypatch.setattr(cpu_bind, "usable_cores", lambda: [0])
    assert main(["--demo", "--profile", "tp2", "serve"]) == 2
    err = capsys.readouterr().err
    assert "may use 1 core" in err and "Traceback" not in err


def test_the_plan_sees_the_binding_the_launch_adds(qhome, monkeypatch):
    """The ledger plans each rank from the binding vLLM will get: no 'auto binding' error for the tp2
    demo (the console would have stopped its start on it), the error only for an "auto" the user set."""
    from backend.ledger import cpu_model, plan_from_settings

    monkeypatch.setattr(cpu_bind, "usable_cores", lambda: [0, 1])
    monkeypatch.setattr(cpu_bind, "numa_nodes", lambda cores, root=None: 1)
    monkeypatch.setattr(cpu_model, "allowed_cpus", lambda: [0, 1])
    monkeypatch.setattr(cpu_model, "cpu_node_map", lambda root=None: {0: 0, 1: 0})
    led = plan_from_settings(load(demo=True, profile="tp2"), check_free=False).to_dict()
    assert led["device_model"]["binding"] == "0|1"
    assert not [p for p in led["problems"] if "NUMA node per rank" in p["message"]]
    auto = load(demo=True, profile="tp2", overrides=["server.env.VLLM_CPU_OMP_THREADS_BIND=auto"])
    led = plan_from_settings(auto, check_free=False).to_dict()
    assert [p for p in led["problems"] if "NUMA node per rank" in p["message"]]
