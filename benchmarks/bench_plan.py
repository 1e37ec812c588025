"""Time `qwen-tui plan`'s own work: the pure plan() and the Settings -> plan adapter.

    python benchmarks/bench_plan.py [runs]

Prints the median (and p95) milliseconds per call. Target: <= 50 ms. The adapter case resolves the
model from the built-in table; the folder case reads config.json and the safetensors headers of a
generated 2-shard model (header only), as for a downloaded model. NVML probing and the vLLM
version probe (`detect_install`) are the caller's and are not timed.
"""

from __future__ import annotations

import json
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from backend.ledger import (  # noqa: E402
    Card,
    PlanParams,
    adapter,  # noqa: E402
    lookup,
    plan,
    plan_from_settings,
)

GiB = 1 << 30


def _settings(model: str):
    try:
        from backend.settings import Settings, defaults
    except ImportError:  # platformdirs missing: a stand-in with the same attributes
        from types import SimpleNamespace

        return SimpleNamespace(server={"model": model, "tensor_parallel_size": 2, "dtype": "bfloat16",
                                       "gpu_memory_utilization": 0.9, "max_model_len": 8192,
                                       "max_num_seqs": 16, "env": {}},
                               planner={"gpu_memory_gib": 24.0, "gpu_name": "NVIDIA GeForce RTX 3090",
                                        "gpu_count": 2, "device": "cuda"}, env={})
    v = defaults()
    v["server"].update(model=model, tensor_parallel_size=2, dtype="bfloat16",
                       gpu_memory_utilization=0.9, max_model_len=8192, max_num_seqs=16)
    return Settings(server=v["server"], console=v["console"], planner=v["planner"], chat=v["chat"])


def _fake_14b(folder: Path) -> None:
    """config.json + two safetensors files whose headers describe Qwen2.5-14B (data left sparse)."""
    cfg = {"model_type": "qwen2", "hidden_size": 5120, "intermediate_size": 13824,
           "num_hidden_layers": 48, "num_attention_heads": 40, "num_key_value_heads": 8,
           "max_position_embeddings": 32768, "vocab_size": 152064, "tie_word_embeddings": False,
           "torch_dtype": "bfloat16"}
    (folder / "config.json").write_text(json.dumps(cfg))
    h, i, v, kv = 5120, 13824, 152064, 1024
    names = {"model.embed_tokens.weight": [v, h], "lm_head.weight": [v, h], "model.norm.weight": [h]}
    for n in range(48):
        p = f"model.layers.{n}."
        names.update({p + "self_attn.q_proj.weight": [h, h], p + "self_attn.q_proj.bias": [h],
                      p + "self_attn.k_proj.weight": [kv, h], p + "self_attn.k_proj.bias": [kv],
                      p + "self_attn.v_proj.weight": [kv, h], p + "self_attn.v_proj.bias": [kv],
                      p + "self_attn.o_proj.weight": [h, h], p + "mlp.gate_proj.weight": [i, h],
                      p + "mlp.up_proj.weight": [i, h], p + "mlp.down_proj.weight": [h, i],
                      p + "input_layernorm.weight": [h], p + "post_attention_layernorm.weight": [h]})
    items = list(names.items())
    for k, chunk in enumerate((items[: len(items) // 2], items[len(items) // 2:])):
        header, off = {}, 0
        for name, shape in chunk:
            nb = 2
            for d in shape:
                nb *= d
            header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [off, off + nb]}
            off += nb
        raw = json.dumps(header).encode()
        with open(folder / f"model-0000{k + 1}-of-00002.safetensors", "wb") as f:
            f.write(struct.pack("<Q", len(raw)) + raw)
            f.truncate(8 + len(raw) + off)  # sparse: full size on paper, nothing written


def _time(fn, runs: int) -> tuple[float, float]:
    fn()
    ts = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t) * 1000)
    ts.sort()
    return statistics.median(ts), ts[int(len(ts) * 0.95) - 1]


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 500
    shape = lookup("Qwen/Qwen2.5-14B-Instruct")
    params = PlanParams(model="Qwen/Qwen2.5-14B-Instruct", dtype="bfloat16", tensor_parallel_size=2,
                        gpu_memory_utilization=0.9, max_model_len=8192, max_num_seqs=16)
    cards = [Card("NVIDIA GeForce RTX 3090", 24 * GiB, cc=(8, 6))] * 2
    results = [("plan() pure", _time(lambda: plan(shape, params, cards).to_dict(), runs))]
    s = _settings("Qwen/Qwen2.5-14B-Instruct")
    results.append(("settings -> plan (built-in table)",
                    _time(lambda: plan_from_settings(s, vllm_version="0.33.0").to_dict(), runs)))
    with tempfile.TemporaryDirectory() as tmp:
        _fake_14b(Path(tmp))
        sf = _settings(tmp)

        def cold():
            adapter._CACHE.clear()  # re-read config.json and both safetensors headers
            return plan_from_settings(sf, vllm_version="0.33.0").to_dict()

        results.append(("settings -> plan (local folder, headers read)", _time(cold, max(20, runs // 10))))
        results.append(("settings -> plan (local folder, cached)",
                        _time(lambda: plan_from_settings(sf, vllm_version="0.33.0").to_dict(), runs)))
    width = max(len(n) for n, _ in results)
    for name, (med, p95) in results:
        print(f"{name:<{width}}  median {med:7.3f} ms   p95 {p95:7.3f} ms")
    worst = max(med for _, (med, _) in results)
    print(f"slowest median {worst:.3f} ms ({'within' if worst <= 50 else 'OVER'} the 50 ms budget)")


if __name__ == "__main__":
    main()
