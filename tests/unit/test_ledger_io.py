"""The ledger's inputs and outputs: safetensors headers, model resolution, Settings, `qwen-tui plan`."""

from __future__ import annotations

import io
import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from backend.ledger import Card, LedgerInputError, PlanParams, plan, plan_from_settings, resolve_shape
from backend.ledger import cli as ledger_cli
from backend.ledger.safetensors_count import classify, count_dir, read_header
from backend.ledger.shapes import from_config, weight_parts
from backend.settings import Settings, defaults
from tests.helpers import ROOT

GiB = 1 << 30

TINY_CFG = {
    "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 64,
    "intermediate_size": 160, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "max_position_embeddings": 4096, "vocab_size": 128,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16",
}
ST_SIZE = {"BF16": 2, "F16": 2, "F32": 4, "I32": 4}


def tiny_tensors(cfg: dict) -> dict[str, list[int]]:
    h, inter, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    hd = h // cfg["num_attention_heads"]
    kv = cfg["num_key_value_heads"] * hd
    t = {"model.embed_tokens.weight": [v, h], "model.norm.weight": [h]}
    if not cfg.get("tie_word_embeddings"):
        t["lm_head.weight"] = [v, h]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        t.update({p + "self_attn.q_proj.weight": [h, h], p + "self_attn.q_proj.bias": [h],
                  p + "self_attn.k_proj.weight": [kv, h], p + "self_attn.k_proj.bias": [kv],
                  p + "self_attn.v_proj.weight": [kv, h], p + "self_attn.v_proj.bias": [kv],
                  p + "self_attn.o_proj.weight": [h, h],
                  p + "mlp.gate_proj.weight": [inter, h], p + "mlp.up_proj.weight": [inter, h],
                  p + "mlp.down_proj.weight": [h, inter],
                  p + "input_layernorm.weight": [h], p + "post_attention_layernorm.weight": [h]})
    return t


def write_st(path: Path, tensors: dict[str, list[int]], dtype: str = "BF16", truncate: int = 0) -> None:
    header, off = {}, 0
    for name, shape in tensors.items():
        n = ST_SIZE[dtype]
        for d in shape:
            n *= d
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + n]}
        off += n
    raw = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw + b"\0" * max(0, off - truncate))


def model_dir(tmp_path: Path, dtype: str = "BF16", **cfg_kw) -> Path:
    d = tmp_path / "Tiny-Qwen2"
    d.mkdir()
    cfg = {**TINY_CFG, **cfg_kw}
    (d / "config.json").write_text(json.dumps(cfg))
    write_st(d / "model.safetensors", tiny_tensors(cfg), dtype)
    return d


def settings(**server) -> Settings:
    v = defaults()
    v["server"].update(model="Qwen/Qwen2.5-14B-Instruct", tensor_parallel_size=2, dtype="bfloat16",
                       gpu_memory_utilization=0.90, max_model_len=8192, max_num_seqs=16)
    planner = v["planner"]
    v["server"].update(server)
    return Settings(server=v["server"], console=v["console"], planner=planner, chat=v["chat"])


@pytest.fixture(autouse=True)
def _isolated(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "no-hf-cache"))
    monkeypatch.delenv("HF_HOME", raising=False)
    monkeypatch.setattr(ledger_cli, "probe_gpus", lambda: None)
    monkeypatch.setattr(ledger_cli, "detect_vllm_version", lambda s: "0.33.0")


# -- safetensors ----------------------------------------------------------------------------------
def test_header_only_count_matches_config_count(tmp_path):
    d = model_dir(tmp_path)
    st = count_dir(d)
    assert st is not None and not st.bad_files
    shape = from_config(TINY_CFG, "tiny")
    by_cfg = weight_parts(shape, "bfloat16")
    by_st = st.parts("bfloat16", shape)
    assert by_st.source == "safetensors"
    for f in ("embed", "lm_head", "layers_split", "layers_kv", "layers_replicated", "other_replicated"):
        assert getattr(by_st, f) == getattr(by_cfg, f), f
    assert by_st.params == by_cfg.params


def test_only_the_header_is_read(tmp_path):
    d = model_dir(tmp_path)
    f = d / "model.safetensors"
    assert "model.embed_tokens.weight" in read_header(f)


def test_float32_checkpoint_counted_at_the_served_dtype(tmp_path):
    d = model_dir(tmp_path, dtype="F32")
    shape = resolve_shape(str(d))
    led = plan(shape, PlanParams(dtype="bfloat16", max_model_len=2048),
               [Card("NVIDIA GeForce RTX 3090", int(24 * GiB))])
    assert led.weights_bytes == weight_parts(from_config(TINY_CFG, "t"), "bfloat16").total


def test_truncated_weights_are_an_error(tmp_path):
    d = tmp_path / "broken"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(TINY_CFG))
    write_st(d / "model.safetensors", tiny_tensors(TINY_CFG), truncate=1000)
    s = settings(model=str(d), tensor_parallel_size=1, max_model_len=2048)
    led = plan_from_settings(s)
    p = {x.kind: x for x in led.problems}["weights-incomplete"]
    assert p.severity == "error" and "model.safetensors" in p.message


def test_index_limits_the_files(tmp_path):
    d = model_dir(tmp_path)
    write_st(d / "consolidated.safetensors", {"x.weight": [1000, 1000]})
    (d / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {k: "model.safetensors" for k in tiny_tensors(TINY_CFG)}}))
    assert [Path(f).name for f in count_dir(d).files] == ["model.safetensors"]


@pytest.mark.parametrize("name,cat", [
    ("model.embed_tokens.weight", "embed"), ("lm_head.weight", "lm_head"),
    ("model.layers.3.self_attn.k_proj.qweight", "kv"), ("model.layers.3.self_attn.o_proj.bias", "replicated"),
    ("model.layers.3.mlp.down_proj.scales", "split"), ("model.layers.0.self_attn.q_norm.weight", "replicated"),
    ("model.layers.0.mlp.gate.weight", "replicated"), ("model.norm.weight", "other"),
])
def test_tensor_classification(name, cat):
    assert classify(name) == cat


# -- model resolution -----------------------------------------------------------------------------
def test_local_folder_without_config(tmp_path):
    with pytest.raises(LedgerInputError, match="no config.json"):
        resolve_shape(str(tmp_path))


def test_local_folder_with_bad_config(tmp_path):
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(LedgerInputError, match="not valid JSON"):
        resolve_shape(str(tmp_path))


def test_unknown_model_id():
    with pytest.raises(LedgerInputError, match="not in the built-in table"):
        resolve_shape("someone/some-model-7b")
    with pytest.raises(LedgerInputError, match="no such folder"):
        resolve_shape("/no/such/model/dir")


def test_hugging_face_cache_is_used(tmp_path, monkeypatch):
    cache = tmp_path / "hub"
    snap = cache / "models--Qwen--Qwen2.5-14B-Instruct" / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps({**TINY_CFG, "num_hidden_layers": 3}))
    (cache / "models--Qwen--Qwen2.5-14B-Instruct" / "refs").mkdir()
    (cache / "models--Qwen--Qwen2.5-14B-Instruct" / "refs" / "main").write_text("abc123")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    shape = resolve_shape("Qwen/Qwen2.5-14B-Instruct")
    assert shape.num_layers == 3 and "Hugging Face cache" in shape.source


# -- settings adapter -----------------------------------------------------------------------------
def test_nvml_gpus_and_cuda_visible_devices():
    gpus = [{"name": "NVIDIA GeForce RTX 3090", "memory_total_bytes": 24 * GiB, "cc": (8, 6)},
            {"name": "NVIDIA GeForce RTX 4090", "memory_total_bytes": 24 * GiB, "cc": (8, 9)},
            {"name": "NVIDIA GeForce RTX 3090", "memory_total_bytes": 24 * GiB, "cc": (8, 6)}]
    s = settings(env={"CUDA_VISIBLE_DEVICES": "0,2"})
    led = plan_from_settings(s, gpus=gpus)
    assert [c["name"] for c in led.cards] == ["NVIDIA GeForce RTX 3090"] * 2
    assert led.fits


def test_free_gpu_memory_precheck():
    gpus = [{"name": "NVIDIA GeForce RTX 3090", "memory_total_bytes": 24 * GiB, "cc": (8, 6),
             "memory_free_bytes": 12 * GiB}] * 2
    led = plan_from_settings(settings(), gpus=gpus)
    assert {p.kind for p in led.problems} >= {"free-memory-too-low"} and not led.fits
    assert plan_from_settings(settings(), gpus=gpus, check_free=False).fits


def test_planner_figures_without_nvml():
    s = settings()
    s.planner.update(gpu_memory_gib=48.0, gpu_name="NVIDIA RTX A6000", gpu_count=2)
    led = plan_from_settings(s)
    assert led.cards[0]["memory_gib"] == 48.0 and led.bandwidth_gbs == 768


# -- the CLI --------------------------------------------------------------------------------------
def test_run_plan_table_exit_0():
    out = io.StringIO()
    assert ledger_cli.run_plan(settings(), False, out=out) == 0
    text = out.getvalue()
    for row in ("Weights, whole model", "Weights per GPU", "Budget per GPU", "KV per token",
                "KV cache tokens", "Max concurrency", "Decode ceiling", "Fits: yes"):
        assert row in text
    assert "196,608 B" in text


def test_run_plan_json_exit_1_when_it_does_not_fit():
    out = io.StringIO()
    assert ledger_cli.run_plan(settings(max_model_len=65536), True, out=out) == 1
    d = json.loads(out.getvalue())
    assert d["fits"] is False and d["problems"][0]["fix"] == "server.max_model_len = 32768"
    assert d["kv_bytes_per_token"] == 196608 and d["kv_bytes_per_token_per_gpu"] == 98304


def test_run_plan_exit_2_on_bad_model(capsys):
    out = io.StringIO()
    assert ledger_cli.run_plan(settings(model="nobody/unknown-model"), True, out=out) == 2
    assert "error" in json.loads(out.getvalue())
    err = capsys.readouterr().err
    assert err.startswith("qwen-tui plan: ") and "Traceback" not in err


def test_cpu_demo_style_plan(tmp_path):
    d = model_dir(tmp_path, num_attention_heads=2, num_key_value_heads=1, hidden_size=256,
                  intermediate_size=512, head_dim=128)
    s = settings(model=str(d), tensor_parallel_size=1, max_model_len=2048, max_num_seqs=8,
                 gpu_memory_utilization=0.2)
    s.planner.update(device="cpu", gpu_memory_gib=9.59)
    out = io.StringIO()
    assert ledger_cli.run_plan(s, True, out=out) == 0
    d = json.loads(out.getvalue())
    assert d["device"] == "cpu" and d["decode_tokens_per_s_ceiling"] is None
    assert d["kv_bytes_per_token"] == 1024 and d["weights_source"] == "safetensors"
    assert 1.2 < d["kv_cache_gib_per_gpu"] < 1.3


def test_backend_ledger_does_not_import_textual():
    code = ("import sys; import backend.ledger, backend.ledger.cli, backend.ledger.adapter; "
            "sys.exit(1 if 'textual' in sys.modules else 0)")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env={"PYTHONPATH": str(ROOT)},
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
