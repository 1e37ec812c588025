"""doctor's CUDA-library and model checks as they met real vLLM 0.20.2 on the H200 (issue 9): the CUDA
major comes from what is installed, never a constant; --load-format dummy needs no weight files."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from backend import doctor
from backend.doctor import cuda_libs
from tests.helpers.doctor import run, settings

ELF_WITH_NEEDED = next((p for p in ("/lib/x86_64-linux-gnu/libz.so.1", "/usr/lib/x86_64-linux-gnu/libz.so.1")
                        if Path(p).exists()), None)


def dist(site: Path, name: str, version: str, requires: list[str] = ()) -> None:
    info = site / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    lines = [f"Name: {name}", f"Version: {version}", *[f"Requires-Dist: {r}" for r in requires]]
    (info / "METADATA").write_text("Metadata-Version: 2.1\n" + "\n".join(lines) + "\n")


def lib(site: Path, rel: str, name: str) -> Path:
    d = site / rel
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_bytes(b"\x7fELF")
    return d


def no_loader(name):
    raise OSError(f"{name}: cannot open shared object file: No such file or directory")


def test_torch_cu130_finds_libcublas_13_under_nvidia_cu13(env, tmp_path):
    site = tmp_path / "site"
    dist(site, "torch", "2.11.0+cu130", ["nvidia-cublas==13.0.0.19; platform_system == 'Linux'"])
    where = lib(site, "nvidia/cu13/lib", "libcublas.so.13")
    env.site_dirs = lambda s: [str(site)]
    env.load_library = no_loader
    c = run(doctor.check_cuda_libs, settings(), env)
    assert c.status == "ok", c
    assert "libcublas.so.13" in c.message and str(where) in c.message and "torch 2.11.0+cu130" in c.message


def test_cu13_build_without_the_library_names_13_and_its_wheel(env, tmp_path):
    site = tmp_path / "site"
    dist(site, "torch", "2.11.0+cu130")
    lib(site, "nvidia/cublas/lib", "libcublas.so.12")  # a leftover of another build is not enough
    env.site_dirs = lambda s: [str(site)]
    env.load_library = no_loader
    c = run(doctor.check_cuda_libs, settings(), env)
    assert c.status == "fail" and "libcublas.so.13" in c.message and "CUDA 13" in c.message
    assert "'nvidia-cublas==13.*'" in c.fix and "-cu13" not in c.fix


def test_cuda_12_from_torch_requirements_when_the_version_has_no_tag(env, tmp_path):
    site = tmp_path / "site"
    dist(site, "torch", "2.5.1", ["nvidia-cublas-cu12==12.4.5.8; platform_system == 'Linux'"])
    where = lib(site, "nvidia/cublas/lib", "libcublas.so.12")
    env.site_dirs = lambda s: [str(site)]
    env.load_library = no_loader
    c = run(doctor.check_cuda_libs, settings(), env)
    assert c.status == "ok" and "libcublas.so.12" in c.message and str(where) in c.message


def test_a_cpu_torch_under_a_cuda_config_fails(env, tmp_path):
    site = tmp_path / "site"
    dist(site, "torch", "2.13.0+cpu")
    env.site_dirs = lambda s: [str(site)]
    c = run(doctor.check_cuda_libs, settings(), env)
    assert c.status == "fail" and "CPU build" in c.message


@pytest.mark.skipif(ELF_WITH_NEEDED is None, reason="no libz.so.1 on this machine to read")
def test_elf_needed_reads_a_real_shared_object(tmp_path):
    assert "libc.so.6" in cuda_libs.elf_needed(Path(ELF_WITH_NEEDED))
    assert cuda_libs.elf_needed(tmp_path / "missing.so") == []
    (tmp_path / "junk.so").write_bytes(b"\x7fELF" + b"\0" * 10)
    assert cuda_libs.elf_needed(tmp_path / "junk.so") == []


def test_cuda_major_from_vllm_C_needed_entries(tmp_path, monkeypatch):
    site = tmp_path / "site"
    (site / "vllm").mkdir(parents=True)
    shutil.copy(ELF_WITH_NEEDED or "/bin/true", site / "vllm" / "_C.abi3.so")
    monkeypatch.setattr(cuda_libs, "elf_needed", lambda p: ["libcudart.so.13", "libc.so.6"])
    b = cuda_libs.detect([str(site)])
    assert b.major == 13 and b.cublas == "libcublas.so.13" and "_C.abi3.so links libcudart.so.13" in b.source


def test_load_format_dummy_skips_the_weights_check(env, tmp_path):
    folder = tmp_path / "Qwen2.5-14B-Instruct"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    c = run(doctor.check_model, settings(model=str(folder), extra_args=["--load-format", "dummy"]), env)
    assert c.status == "ok" and "--load-format dummy" in c.message
    c = run(doctor.check_model, settings(model=str(folder), extra_args=["--load-format=dummy"]), env)
    assert c.status == "ok"
    c = run(doctor.check_model, settings(model=str(folder)), env)
    assert c.status == "fail" and "no *.safetensors" in c.message
    (folder / "config.json").unlink()  # the config is read even with dummy weights
    c = run(doctor.check_model, settings(model=str(folder), extra_args=["--load-format", "dummy"]), env)
    assert c.status == "fail" and "config.json" in c.message
