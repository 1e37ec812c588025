"""Model shapes: the numbers the ledger needs from a model's `config.json`, and a built-in table.

The table lets `qwen-tui plan` answer before the weights are downloaded. It holds the Qwen2.5 family
(0.5B-72B; base, -Instruct, -Instruct-AWQ, -Instruct-GPTQ-Int4/-Int8, keyed by Hugging Face repo id)
and the other models that appear in the project's real vLLM logs (Llama-3.1, Qwen2, Qwen3, QwQ).
Values are the public `config.json` ones; the Qwen2.5 rows reproduce the exact parameter totals of
the published safetensors (0.5B 494,032,768; 1.5B 1,543,714,304; 3B 3,085,938,688; 72B 72,706,203,648;
tested).

Weights are counted per tensor-parallel category, because vLLM shards them differently:
embedding and lm_head are vocab-parallel (split, vocab padded to a multiple of 64), q/gate/up are
column-parallel and o/down row-parallel (split), k/v are split by KV head but each rank keeps at least
one head (replicated when num_kv_heads < TP), norms and row-parallel biases are replicated.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any

DTYPE_BYTES = {
    "float32": 4, "float": 4, "float16": 2, "half": 2, "bfloat16": 2,
    "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "fp8_inc": 1, "fp8_ds_mla": 1, "int8": 1,
}
VOCAB_PADDING = 64  # vLLM DEFAULT_VOCAB_PADDING_SIZE


def dtype_bytes(name: str) -> int:
    try:
        return DTYPE_BYTES[name]
    except KeyError:
        raise ValueError(f"unknown dtype {name!r}") from None


def canonical_dtype(name: str | None) -> str | None:
    """'half' -> 'float16', 'float' -> 'float32', 'torch.bfloat16' -> 'bfloat16'."""
    if name is None:
        return None
    n = str(name).lower().replace("torch.", "")
    return {"half": "float16", "float": "float32", "fp16": "float16", "bf16": "bfloat16",
            "fp32": "float32"}.get(n, n)


@dataclass(frozen=True)
class QuantSpec:
    """Weight quantization of the linear layers (embedding and lm_head stay in 16 bits)."""

    method: str  # awq, gptq, fp8, bitsandbytes, compressed-tensors ...
    bits: int = 4
    group_size: int = 128  # -1: one scale per output channel

    def linear_bytes(self, n_in: int, n_out: int) -> float:
        w = n_in * n_out
        if self.method in ("awq", "gptq", "awq_marlin", "gptq_marlin", "marlin", "compressed-tensors"):
            groups = 1 if self.group_size in (-1, 0) else max(1, n_in // self.group_size)
            # packed weights + fp16 scales + packed zero points (+ gptq's int32 g_idx)
            extra_gidx = n_in * 4 if self.method.startswith("gptq") else 0
            return w * self.bits / 8 + groups * n_out * 2 + groups * n_out * self.bits / 8 + extra_gidx
        if self.method.startswith("fp8") or self.method in ("modelopt", "fbgemm_fp8"):
            return w + n_out * 4
        if self.method == "bitsandbytes":
            return w * 0.5 + w / 64 * 4 if self.bits == 4 else w + n_out * 4
        return w * self.bits / 8


@dataclass(frozen=True)
class WeightParts:
    """Bytes of the weights as vLLM holds them, grouped by how tensor parallelism shards them."""

    embed: int  # vocab-parallel, first pipeline stage
    lm_head: int  # vocab-parallel, last stage; 0 when tied to the embedding
    layers_split: int  # column/row-parallel weights of all layers (incl. MoE experts)
    layers_kv: int  # k/v projections of all layers: split by KV head, >= 1 head per rank
    layers_replicated: int  # norms, row-parallel biases, MoE router: a full copy per rank
    other_replicated: int  # final norm, rotary cos/sin cache
    params: int  # parameter count (unpacked), for display
    source: str = "config"  # "config" or "safetensors"

    @property
    def total(self) -> int:
        return (self.embed + self.lm_head + self.layers_split + self.layers_kv
                + self.layers_replicated + self.other_replicated)


@dataclass(frozen=True)
class ModelShape:
    name: str
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    max_position_embeddings: int
    tie_word_embeddings: bool = False
    torch_dtype: str = "bfloat16"
    qkv_bias: bool = False
    qk_norm: bool = False
    num_experts: int = 0
    num_experts_per_tok: int = 0
    moe_intermediate_size: int = 0
    shared_expert_intermediate_size: int = 0  # Qwen2-MoE's shared expert (a dense MLP beside the experts)
    rope_scaling_factor: float = 1.0  # vLLM multiplies the derived max length by it (yarn, dynamic ...)
    quant: QuantSpec | None = None
    source: str = "built-in table"
    safetensors: object | None = field(default=None, compare=False)  # SafetensorsCount when present

    @property
    def derived_max_model_len(self) -> int:
        return int(self.max_position_embeddings * self.rope_scaling_factor)


# -- parameter / byte counting from the config ---------------------------------------------------
def _layer_counts(s: ModelShape) -> dict[str, int]:
    """Unquantized parameter numbers of one decoder layer, by sharding category."""
    h, hd = s.hidden_size, s.head_dim
    q_out, kv_out = s.num_attention_heads * hd, s.num_kv_heads * hd
    split = h * q_out + q_out * h  # q (column) + o (row)
    if s.qkv_bias:
        split += q_out
    kv = 2 * h * kv_out + (2 * kv_out if s.qkv_bias else 0)
    replicated = 2 * h + (2 * hd if s.qk_norm else 0)
    if s.num_experts:
        split += s.num_experts * 3 * h * s.moe_intermediate_size
        replicated += h * s.num_experts  # router
        if s.shared_expert_intermediate_size:  # a dense MLP, split like one, and its 1-wide gate
            split += 3 * h * s.shared_expert_intermediate_size
            replicated += h
    else:
        split += 3 * h * s.intermediate_size
    return {"split": split, "kv": kv, "replicated": replicated}


def param_count(s: ModelShape) -> int:
    """Exact parameter count of a dense/MoE decoder from its config (Qwen2.5-14B: 14,770,033,664)."""
    per = _layer_counts(s)
    emb = s.vocab_size * s.hidden_size
    return (s.num_layers * sum(per.values()) + emb * (1 if s.tie_word_embeddings else 2)
            + s.hidden_size)


def weight_parts(s: ModelShape, dtype: str, quant: QuantSpec | None = None) -> WeightParts:
    """Bytes by sharding category, for weights held in `dtype` (quantized linears per `quant`)."""
    if s.safetensors is not None:
        parts: WeightParts = s.safetensors.parts(dtype, s)  # type: ignore[attr-defined]  # a SafetensorsCount
        return parts
    b = dtype_bytes(dtype)
    quant = quant or s.quant
    h, hd, L = s.hidden_size, s.head_dim, s.num_layers
    q_out, kv_out = s.num_attention_heads * hd, s.num_kv_heads * hd
    per = _layer_counts(s)

    def lin(n_in: int, n_out: int) -> float:
        return quant.linear_bytes(n_in, n_out) if quant else n_in * n_out * b

    if quant:
        split = lin(h, q_out) + lin(q_out, h) + (q_out * b if s.qkv_bias else 0)
        if s.num_experts:
            split += s.num_experts * (2 * lin(h, s.moe_intermediate_size)
                                      + lin(s.moe_intermediate_size, h))
            if s.shared_expert_intermediate_size:
                split += (2 * lin(h, s.shared_expert_intermediate_size)
                          + lin(s.shared_expert_intermediate_size, h))
        else:
            split += 2 * lin(h, s.intermediate_size) + lin(s.intermediate_size, h)
        kv = 2 * lin(h, kv_out) + (2 * kv_out * b if s.qkv_bias else 0)
    else:
        split, kv = per["split"] * b, per["kv"] * b
    emb = s.vocab_size * h * b
    rotary = s.max_position_embeddings * hd * b  # one shared cos/sin cache in the model dtype
    return WeightParts(
        embed=emb, lm_head=0 if s.tie_word_embeddings else emb,
        layers_split=int(L * split), layers_kv=int(L * kv),
        layers_replicated=L * per["replicated"] * b, other_replicated=h * b + rotary,
        params=param_count(s), source="config")


def kv_heads_per_gpu(num_kv_heads: int, tp: int) -> int:
    """vLLM `get_num_kv_heads`: KV heads are split across TP, each rank keeps at least one."""
    return max(1, num_kv_heads // tp)


def padded_vocab(vocab: int) -> int:
    return -(-vocab // VOCAB_PADDING) * VOCAB_PADDING


def weights_per_gpu(s: ModelShape, parts: WeightParts, tp: int, pp: int = 1) -> tuple[int, list[int]]:
    """Bytes each GPU holds: (largest over ranks, per pipeline stage).

    Vocab-parallel tensors: padded vocab / TP rows each. KV projections: kv_heads_per_gpu / kv_heads of
    the total. Layers are split over pipeline stages as evenly as vLLM does (remainder to the last).
    """
    vocab_share = padded_vocab(s.vocab_size) / s.vocab_size / tp
    kv_share = kv_heads_per_gpu(s.num_kv_heads, tp) / s.num_kv_heads
    per_layer = parts.layers_split / tp + parts.layers_kv * kv_share + parts.layers_replicated
    per_layer /= s.num_layers
    stages = stage_layers(s.num_layers, pp)
    out = []
    for i, n in enumerate(stages):
        b = n * per_layer
        if i == 0:
            b += parts.embed * vocab_share
        if i == len(stages) - 1:
            # a tied lm_head on a later stage needs its own copy of the embedding
            lm = parts.lm_head or (parts.embed if pp > 1 else 0)
            b += lm * vocab_share + parts.other_replicated
        out.append(int(b))
    return max(out), out


def stage_layers(num_layers: int, pp: int) -> list[int]:
    """vLLM get_pp_indices: equal partitions, the remainder going to the last stages."""
    pp = max(1, pp)
    base, rem = divmod(num_layers, pp)
    parts = [base] * pp
    for i in range(rem):
        parts[pp - 1 - i] += 1
    return parts


# -- built-in table ------------------------------------------------------------------------------
def _qwen25(size: str, L: int, h: int, nh: int, nkv: int, inter: int, vocab: int, tie: bool) -> ModelShape:
    return ModelShape(name=f"Qwen2.5-{size}", num_layers=L, hidden_size=h, num_attention_heads=nh,
                      num_kv_heads=nkv, head_dim=h // nh, intermediate_size=inter, vocab_size=vocab,
                      max_position_embeddings=32768, tie_word_embeddings=tie, qkv_bias=True)


QWEN25: dict[str, ModelShape] = {
    "0.5b": _qwen25("0.5B", 24, 896, 14, 2, 4864, 151936, True),
    "1.5b": _qwen25("1.5B", 28, 1536, 12, 2, 8960, 151936, True),
    "3b": _qwen25("3B", 36, 2048, 16, 2, 11008, 151936, True),
    "7b": _qwen25("7B", 28, 3584, 28, 4, 18944, 152064, False),
    "14b": _qwen25("14B", 48, 5120, 40, 8, 13824, 152064, False),
    "32b": _qwen25("32B", 64, 5120, 40, 8, 27648, 152064, False),
    "72b": _qwen25("72B", 80, 8192, 64, 8, 29568, 152064, False),
}
QWEN25_PARAMS = {"0.5b": 494_032_768, "1.5b": 1_543_714_304, "3b": 3_085_938_688,
                 "7b": 7_615_616_512, "14b": 14_770_033_664, "32b": 32_763_876_352,
                 "72b": 72_706_203_648}


def _dense(name: str, L: int, h: int, nh: int, nkv: int, hd: int, inter: int, vocab: int,
           max_pos: int, **kw: Any) -> ModelShape:
    return ModelShape(name=name, num_layers=L, hidden_size=h, num_attention_heads=nh, num_kv_heads=nkv,
                      head_dim=hd, intermediate_size=inter, vocab_size=vocab,
                      max_position_embeddings=max_pos, **kw)


# Other models seen in the project's real logs (public config.json values).
OTHERS: dict[str, ModelShape] = {
    "llama-3.1-8b": _dense("Llama-3.1-8B", 32, 4096, 32, 8, 128, 14336, 128256, 131072),
    "llama-3.1-70b": _dense("Llama-3.1-70B", 80, 8192, 64, 8, 128, 28672, 128256, 131072),
    "qwen2-7b": _dense("Qwen2-7B", 28, 3584, 28, 4, 128, 18944, 152064, 32768, qkv_bias=True),
    "qwq-32b": _dense("QwQ-32B", 64, 5120, 40, 8, 128, 27648, 152064, 40960, qkv_bias=True),
    "qwen3-8b": _dense("Qwen3-8B", 36, 4096, 32, 8, 128, 12288, 151936, 40960, qk_norm=True),
    "qwen3-14b": _dense("Qwen3-14B", 40, 5120, 40, 8, 128, 17408, 151936, 40960, qk_norm=True),
    "qwen3-32b": _dense("Qwen3-32B", 64, 5120, 64, 8, 128, 25600, 151936, 40960, qk_norm=True),
    "qwen3-30b-a3b": _dense("Qwen3-30B-A3B", 48, 2048, 32, 4, 128, 6144, 151936, 40960, qk_norm=True,
                            num_experts=128, num_experts_per_tok=8, moe_intermediate_size=768),
}
_OTHER_ALIASES = {
    "meta-llama-3.1-8b": "llama-3.1-8b", "meta-llama-3.1-70b": "llama-3.1-70b",
    "qwen3-coder-30b-a3b": "qwen3-30b-a3b",
}

_QWEN25_RE = re.compile(
    r"^qwen2\.5-(?P<size>0\.5|1\.5|3|7|14|32|72)b(?P<instruct>-instruct)?"
    r"(?P<quant>-awq|-gptq-int4|-gptq-int8)?$")
_SUFFIXES = ("-instruct", "-chat", "-it")


def lookup(model: str) -> ModelShape | None:
    """Shape of a model id from the built-in table, or None.

    "Qwen/Qwen2.5-14B-Instruct", "qwen2.5-14b", "Qwen2.5-7B-Instruct-AWQ" and a local path ending in
    such a name all resolve. Base Qwen2.5 7B-72B have max_position_embeddings 131072, -Instruct 32768.
    """
    name = model.rstrip("/").split("/")[-1].lower()
    m = _QWEN25_RE.match(name)
    if m:
        size = m["size"] + "b"
        shape = QWEN25[size]
        label = model.rstrip("/").split("/")[-1]
        kw: dict[str, Any] = {"name": label}
        if not m["instruct"] and not m["quant"] and size in ("7b", "14b", "32b", "72b"):
            kw["max_position_embeddings"] = 131072
        q = m["quant"]
        if q:
            bits = 8 if q.endswith("int8") else 4
            kw["quant"] = QuantSpec("awq" if q == "-awq" else "gptq", bits=bits, group_size=128)
            kw["torch_dtype"] = "float16"
        return replace(shape, **kw)
    key = name
    for suf in ("-awq", "-fp8", "-gptq-int4", "-gptq-int8"):
        if key.endswith(suf):
            return None  # a quantized variant of a non-Qwen2.5 model: its config is needed
    for suf in _SUFFIXES + ("-2507",):
        if key.endswith(suf):
            key = key[: -len(suf)]
    for suf in _SUFFIXES + ("-2507",):
        if key.endswith(suf):
            key = key[: -len(suf)]
    key = _OTHER_ALIASES.get(key, key)
    other = OTHERS.get(key)
    if other is None:
        return None
    shape = other
    kw = {"name": model.rstrip("/").split("/")[-1]}
    if "-2507" in name and key.startswith("qwen3"):
        kw["max_position_embeddings"] = 262144  # the 2507 refresh of Qwen3 has 256K context
    return replace(shape, **kw)


# -- config.json ---------------------------------------------------------------------------------
def _quant_from_config(qc: dict[str, Any] | None) -> QuantSpec | None:
    if not qc:
        return None
    method = str(qc.get("quant_method") or qc.get("quantization") or "").lower()
    if not method:
        return None
    if method == "bitsandbytes":
        bits = 4 if qc.get("load_in_4bit", True) else 8
        return QuantSpec(method, bits=bits, group_size=64)
    if method == "fp8":
        return QuantSpec("fp8", bits=8, group_size=-1)
    if method == "compressed-tensors":
        bits, group = 8, -1
        for grp in (qc.get("config_groups") or {}).values():
            w = (grp or {}).get("weights") or {}
            bits = int(w.get("num_bits") or bits)
            group = int(w.get("group_size") or -1) if w.get("group_size") else -1
            break
        return QuantSpec(method if bits < 8 else "fp8", bits=bits, group_size=group)
    return QuantSpec(method, bits=int(qc.get("bits") or qc.get("w_bit") or 4),
                     group_size=int(qc.get("group_size") or qc.get("q_group_size") or 128))


def from_config(cfg: dict[str, Any], name: str, source: str = "config.json") -> ModelShape:
    """A ModelShape from a Hugging Face `config.json` dict (nested `text_config` is honoured)."""
    text = cfg.get("text_config") or cfg.get("llm_config") or {}
    c = {**cfg, **text} if isinstance(text, dict) else dict(cfg)

    def need(*keys: str) -> Any:
        for k in keys:
            if c.get(k) is not None:
                return c[k]
        raise KeyError(f"config.json has no {keys[0]}")

    h = int(need("hidden_size", "n_embd", "d_model"))
    nh = int(need("num_attention_heads", "n_head"))
    nkv = int(c.get("num_key_value_heads") or c.get("num_kv_heads") or nh)
    hd = int(c.get("head_dim") or h // nh)
    L = int(need("num_hidden_layers", "n_layer", "num_layers"))
    experts = int(c.get("num_experts") or c.get("num_local_experts") or c.get("n_routed_experts") or 0)
    inter = int(c.get("intermediate_size") or c.get("ffn_hidden_size") or 4 * h)
    max_pos = int(c.get("max_position_embeddings") or c.get("n_positions") or c.get("seq_length")
                  or 2048)
    rope = c.get("rope_scaling") or {}
    factor = 1.0
    if isinstance(rope, dict):
        rtype = str(rope.get("rope_type") or rope.get("type") or "")
        # vLLM _get_and_verify_max_len: scaling multiplies the length except for these types
        if rope.get("factor") and rtype not in ("su", "longrope", "llama3", "mrope", "default"):
            factor = float(rope["factor"])
    model_type = str(c.get("model_type") or "")
    return ModelShape(
        name=name, num_layers=L, hidden_size=h, num_attention_heads=nh, num_kv_heads=nkv,
        head_dim=hd, intermediate_size=inter, vocab_size=int(need("vocab_size")),
        max_position_embeddings=max_pos,
        tie_word_embeddings=bool(c.get("tie_word_embeddings", cfg.get("tie_word_embeddings", False))),
        torch_dtype=canonical_dtype(c.get("torch_dtype") or c.get("dtype") or "bfloat16") or "bfloat16",
        qkv_bias=bool(c.get("attention_bias") or c.get("qkv_bias") or model_type.startswith("qwen2")),
        qk_norm=model_type.startswith("qwen3"),
        num_experts=experts,
        num_experts_per_tok=int(c.get("num_experts_per_tok") or 0),
        moe_intermediate_size=int(c.get("moe_intermediate_size") or (inter if experts else 0)),
        shared_expert_intermediate_size=int(c.get("shared_expert_intermediate_size") or 0) if experts else 0,
        rope_scaling_factor=factor,
        quant=_quant_from_config(cfg.get("quantization_config") or c.get("quantization_config")),
        source=source)
