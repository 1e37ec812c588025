"""Count weights from *.safetensors headers without reading tensor data.

A safetensors file starts with an 8-byte little-endian header length N and N bytes of JSON:
`{"tensor.name": {"dtype": "BF16", "shape": [..], "data_offsets": [a, b]}, "__metadata__": {...}}`.
Only those 8 + N bytes are read per file. Tensors are grouped by how vLLM shards them across
tensor-parallel ranks (see shapes.WeightParts); floating tensors are re-counted at the dtype vLLM
loads them in (e.g. a float32 checkpoint served as bfloat16), packed integer / fp8 tensors and
quantization scales keep their stored size.
"""

from __future__ import annotations

import json
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from backend.ledger.shapes import ModelShape, WeightParts, dtype_bytes

ST_DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1,
                  "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1, "U16": 2, "U32": 4,
                  "U64": 8, "F8_E8M0": 1, "F4": 1}
FLOAT_DTYPES = {"F64", "F32", "F16", "BF16"}
MAX_HEADER = 100 * 1024 * 1024  # the format's own limit


class SafetensorsError(Exception):
    pass


def read_header(path: Path) -> dict[str, Any]:
    """The JSON header of one .safetensors file (8-byte length + JSON; no tensor data)."""
    return _read(path)[0]


def _read(path: Path) -> tuple[dict[str, Any], int]:
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) != 8:
            raise SafetensorsError(f"{path}: shorter than a safetensors header")
        (n,) = struct.unpack("<Q", raw)
        if n > MAX_HEADER:
            raise SafetensorsError(f"{path}: header length {n} is not plausible")
        data = f.read(n)
    if len(data) != n:
        raise SafetensorsError(f"{path}: header cut short ({len(data)} of {n} bytes)")
    try:
        return json.loads(data), n
    except ValueError as e:
        raise SafetensorsError(f"{path}: header is not JSON: {e}") from None


_LAYER = re.compile(r"\.(?:layers|h|blocks|layer)\.\d+\.")
_EMBED = re.compile(r"(?:embed_tokens|wte|word_embeddings|tok_embeddings)\.")
_NORM = re.compile(r"(?:norm|ln_\d|ln_f|layernorm)", re.I)
_ROW_BIAS = re.compile(r"(?:o_proj|down_proj|dense|out_proj|w2|c_proj)\.bias$")
_KV = re.compile(r"(?:\bk_proj|\bv_proj)\.")
_ROUTER = re.compile(r"\.mlp\.gate\.(?:weight|bias)$|\.router\.|\.gate\.e_score_correction_bias$")


def classify(name: str) -> str:
    """embed | lm_head | split | kv | replicated (for per-layer tensors) | other (top-level)."""
    if _EMBED.search(name):
        return "embed"
    if name.startswith("lm_head.") or name == "output.weight":
        return "lm_head"
    if _LAYER.search(name):
        tail = name.rsplit(".layers.", 1)[-1]
        if _NORM.search(tail) or _ROW_BIAS.search(name) or _ROUTER.search(name):
            return "replicated"
        if _KV.search(name):
            return "kv"
        return "split"
    if "rotary_emb" in name:
        return "ignore"
    if _NORM.search(name):
        return "other"
    return "split"  # e.g. vision towers, which vLLM shards too


@dataclass
class _Bucket:
    float_numel: int = 0  # counted again at the model dtype
    kept_bytes: int = 0  # packed ints, fp8, scales: as stored


@dataclass
class SafetensorsCount:
    files: list[str]
    buckets: dict[str, _Bucket] = field(default_factory=dict)
    params: int = 0
    stored_bytes: int = 0
    bad_files: list[str] = field(default_factory=list)  # unreadable header, or shorter than it says

    def add(self, name: str, info: dict[str, Any]) -> None:
        cat = classify(name)
        if cat == "ignore":
            return
        dt = str(info.get("dtype", "")).upper()
        shape = info.get("shape") or []
        numel = 1
        for d in shape:
            numel *= int(d)
        offs = info.get("data_offsets") or [0, numel * ST_DTYPE_BYTES.get(dt, 2)]
        nbytes = int(offs[1]) - int(offs[0])
        b = self.buckets.setdefault(cat, _Bucket())
        if dt in FLOAT_DTYPES and "scale" not in name.rsplit(".", 1)[-1]:
            b.float_numel += numel
        else:
            b.kept_bytes += nbytes
        self.params += numel
        self.stored_bytes += nbytes

    def _bytes(self, cat: str, dsize: int) -> int:
        b = self.buckets.get(cat)
        return b.float_numel * dsize + b.kept_bytes if b else 0

    def parts(self, dtype: str, shape: ModelShape) -> WeightParts:
        d = dtype_bytes(dtype)
        embed = self._bytes("embed", d)
        lm_head = self._bytes("lm_head", d)
        if not lm_head and not shape.tie_word_embeddings:
            lm_head = embed  # untied but absent from the files: vLLM still allocates it
        rotary = shape.max_position_embeddings * shape.head_dim * d
        return WeightParts(embed=embed, lm_head=lm_head, layers_split=self._bytes("split", d),
                           layers_kv=self._bytes("kv", d),
                           layers_replicated=self._bytes("replicated", d),
                           other_replicated=self._bytes("other", d) + rotary,
                           params=self.params, source="safetensors")


def weight_files(model_dir: Path) -> list[Path]:
    """The *.safetensors files vLLM would load: those in the index's weight_map when there is one."""
    index = model_dir / "model.safetensors.index.json"
    if index.is_file():
        try:
            wm = json.loads(index.read_text(encoding="utf-8")).get("weight_map") or {}
            files = sorted({model_dir / f for f in wm.values()})
            if files and all(f.is_file() for f in files):
                return files
        except (OSError, ValueError):
            pass
    return sorted(model_dir.glob("*.safetensors"))


def count_dir(model_dir: Path) -> SafetensorsCount | None:
    """Count every weight file of a model folder; None when there are none.

    A file whose header cannot be read, or which is shorter than its header says (an interrupted
    download: vLLM fails on it with "incomplete metadata, file not fully covered"), is listed in
    `bad_files`.
    """
    files = weight_files(Path(model_dir))
    if not files:
        return None
    out = SafetensorsCount(files=[str(f) for f in files])
    for f in files:
        try:
            header, n = _read(f)
            size = f.stat().st_size
        except (OSError, SafetensorsError):
            out.bad_files.append(str(f))
            continue
        end = 0
        for name, info in header.items():
            if name != "__metadata__" and isinstance(info, dict):
                out.add(name, info)
                offs = info.get("data_offsets") or [0, 0]
                end = max(end, int(offs[1]))
        if size < 8 + n + end:
            out.bad_files.append(str(f))
    return out
