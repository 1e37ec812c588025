"""End to end on the real CPU build: a config file of the user's whose KV cache cannot hold one request
(the demo's model, gpu_memory_utilization 0.02: less than the worker's own memory) fails with
no_cache_memory; `status --json` offers the fix with the ledger's verdict; `qwen-tui fix --yes` saves
it into that file (its comments kept) and the server reaches READY."""

from __future__ import annotations

import json

import pytest

from tests.helpers.e2e import START_TIMEOUT, cli, kill_left_vllm, qwen_home, wait_state

pytestmark = pytest.mark.e2e


def test_fix_yes_turns_a_failing_config_into_a_ready_server(tmp_path, vllm_lock):
    from backend import demo
    from backend.server import procs
    from tests.helpers.console import closed_port

    with qwen_home(tmp_path / "home"):
        assert not procs.find_vllm_processes(), "vLLM processes are already running on this machine"
        cfg = tmp_path / "config.toml"
        cfg.write_text(f'# my settings\n[server]\nmodel = "{demo.ensure_model()}"\nserved_model_name = "tiny"\n'
                       'dtype = "bfloat16"\nmax_model_len = 2048\nmax_num_seqs = 8\n'
                       f"gpu_memory_utilization = 0.02  # far too little\nport = {closed_port()}\n"
                       '\n[planner]\ndevice = "cpu"\n')
        c = ("--config", str(cfg))
        try:
            r = cli(*c, "serve", "--detach", "--wait", str(START_TIMEOUT), "--json", timeout=START_TIMEOUT + 60)
            assert r.returncode == 1, r.stdout + r.stderr
            st = wait_state({"failed"}, 60)
            assert st["failure"]["kind"] == "no_cache_memory", st["failure"]
            r = cli(*c, "status", "--json", timeout=60)
            fix = json.loads(r.stdout)["fix"]
            assert fix["applicable"] and fix["changes"][0]["setting"] == "server.gpu_memory_utilization", fix
            new = fix["changes"][0]["value"]
            assert 0.02 < new <= 0.2 and fix["verdict"]["fits"] is True, fix
            r = cli(*c, "fix", "--yes", "--wait", str(START_TIMEOUT), "--json", timeout=START_TIMEOUT + 120)
            out = json.loads(r.stdout)
            assert r.returncode == 0 and out["applied"] and out["status"]["state"] == "ready", out
            text = cfg.read_text()
            assert f"gpu_memory_utilization = {new}  # far too little" in text and "# my settings" in text
        finally:
            cli("stop", timeout=120)
            kill_left_vllm()
