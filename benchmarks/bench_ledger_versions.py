"""The ledger's KV figure against real vLLM logs of any version: `python benchmarks/bench_ledger_versions.py DIR`.

For every *.log in DIR (a fixture header of `#` lines, then the log; ../shared/fixtures/vllm-logs/README.md), the
plan is made from what the log and its header state (vLLM version, model, the CUDA total, utilization,
max_model_len, max_num_seqs, dtype, TP) and compared with the KV cache vLLM printed (tokens, else GiB). A file
holding several runs (`# [cut] run --max-model-len N` lines) is planned run by run. A log that does not state
enough is listed with the reason. The version range each plan followed (backend/ledger/versions.py) is printed
beside it; run it once with PYTHONPATH at an older checkout for the "before" column.

Exit 0 with a table (or `--json`), 2 when DIR is missing or holds no log. Nothing is fitted here.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from backend.ledger import Card, PlanParams, lookup, plan  # noqa: E402
from backend.logparse import LogParser  # noqa: E402

GiB = 1 << 30
_FLAG = re.compile(r"--([a-z][\w-]*)[ =]([^\s,;)]+)")
_KV = re.compile(r"\b(gpu-memory-utilization|max-model-len|tensor parallel|dtype)[: ]+\s*([\d.]+|\w+)")
_MIB_TOTAL = re.compile(r"([\d,]{5,}) MiB(?: total)?")
_MIB_RESERVED = re.compile(r"([\d,]+) MiB reserved")
_TOTAL_GIB = re.compile(r"total_gpu_memory[=(]\s*([\d.]+)\s*GiB")
_VERSION_LINE = re.compile(r"vllm version:(.*)", re.I)
_BODY_HASH = re.compile(r"# ?\w+ blocks: \d")  # V0's own "# GPU blocks: N" line is log, not header
_NUM = re.compile(r"v?(\d+\.\d+(?:\.\d+)?)")


def split(text: str) -> tuple[list[str], list[tuple[str, list[str]]]]:
    """(header lines, [(segment label, body lines)])."""
    lines = text.splitlines()
    n = 0
    while n < len(lines) and lines[n].startswith("#") and not _BODY_HASH.match(lines[n]):
        n += 1
    head, body = lines[:n], lines[n:]
    first = next((ln.split("segments:", 1)[1].strip() for ln in head if "segments:" in ln), "")
    segs: list[tuple[str, list[str]]] = [(first, [])]
    for ln in body:
        if ln.startswith("# [cut] run"):
            segs.append((ln[len("# [cut] "):], []))
        else:
            segs[-1][1].append(ln)
    return head, [s for s in segs if any(x.strip() for x in s[1])]


def _shape(head: str, rep: dict[str, Any]) -> Any:
    names = [str(rep.get("model") or "")] + re.findall(r"[\w./-]*(?:Qwen|Llama|llama|Mistral|qwen)[\w./-]*", head)
    for n in names:
        n = n.rstrip(".'").removesuffix("'s")
        if n and (s := lookup(n)) is not None:
            return s
    return None


def _settings(head: str, label: str, info: dict[str, Any]) -> dict[str, Any]:
    got: dict[str, Any] = {}
    for k, v in _KV.findall(head) + _FLAG.findall(head) + _FLAG.findall(" " + label):
        got[k.replace(" ", "-")] = v
    def num(key: str, cast: Any) -> Any:
        raw = info.get(key.replace("-", "_"), got.get(key))
        try:
            return cast(raw) if raw is not None else None
        except ValueError:
            return None
    return {"util": num("gpu-memory-utilization", float), "max_len": num("max-model-len", int),
            "seqs": num("max-num-seqs", int), "tp": num("tensor-parallel-size", int) or num("tensor-parallel", int),
            "dtype": info.get("dtype") or got.get("dtype")}


def _card(head: str, rep: dict[str, Any]) -> Card | None:
    totals = [t.get("device_total_gib") for t in (rep.get("breakdown") or {}).values() if t.get("device_total_gib")]
    total = totals[0] if totals else rep.get("total_gpu_gib")
    if total:
        return Card("GPU (CUDA total from the log)", int(total * GiB), memory_reserved_bytes=0, source="log")
    m = _MIB_TOTAL.search(head)
    if m:
        r = _MIB_RESERVED.search(head)
        return Card("GPU (header)", int(m.group(1).replace(",", "")) << 20,
                    memory_reserved_bytes=(int(r.group(1).replace(",", "")) << 20) if r else None, source="header")
    m = _TOTAL_GIB.search(head)
    return Card("GPU (header)", int(float(m.group(1)) * GiB), memory_reserved_bytes=0, source="header") if m else None


def _header_version(head: str, name: str) -> str | None:
    """The header's `vllm version:` line (its first version number), else the file name's `vX.Y.Z-` prefix."""
    m = _VERSION_LINE.search(head)
    n = _NUM.search(m.group(1)) if m else None
    if n is None:
        n = re.match(r"v(\d+\.\d+\.\d+)", name)
    return n.group(1) if n else None


def evaluate(path: Path) -> list[dict[str, Any]]:
    text = path.read_text(errors="replace")
    head_lines, segs = split(text)
    head = "\n".join(head_lines)
    rows = []
    for label, body in segs or [("", [])]:
        p = LogParser()
        for ln in body:
            p.feed(ln)
        p.end_of_log()
        rep = p.report()
        row: dict[str, Any] = {"log": path.name + (f" [{label[:32]}]" if label else "")}
        tokens, gib = rep.get("kv_cache_tokens"), rep.get("kv_cache_gib")
        if not tokens and gib is None:
            rows.append({**row, "skip": "no KV figure"})
            continue
        version = rep.get("vllm_version") or _header_version(head, path.name)
        shape, card = _shape(head, rep), _card(head, {**p.figures, **rep})
        st = _settings(head, label, p.info)
        why = ("vLLM version not stated" if not version else "model shape not in the built-in table" if shape is None
               else "GPU memory not stated" if card is None else "utilization not stated" if st["util"] is None
               else None)
        if "cpu" in path.name.lower():
            why = why or "CPU build (tests/unit/test_ledger_fixtures.py plans it with its node memory)"
        if why:
            rows.append({**row, "skip": why})
            continue
        params = PlanParams(model=shape.name, gpu_memory_utilization=st["util"], max_model_len=st["max_len"],
                            max_num_seqs=st["seqs"], tensor_parallel_size=st["tp"] or 1, dtype=st["dtype"],
                            vllm_version=str(version))
        led = plan(shape, params, [card])
        rng = getattr(led, "vllm_range", None) or {}
        if tokens:
            want, got, unit = float(tokens), float(led.kv_cache_tokens), "tokens"
        else:
            want, got, unit = float(gib), led.kv_available_bytes_per_gpu / GiB, "GiB"
        err = 100.0 * (got - want) / abs(want) if want else None
        rows.append({**row, "version": str(version), "range": rng.get("id", "-"), "unit": unit, "vllm": want,
                     "plan": got, "error_pct": None if err is None else round(err, 2)})
    return rows


def main(argv: list[str]) -> int:
    as_json = "--json" in argv
    rest = [a for a in argv if a != "--json"]
    if len(rest) != 1:
        print("usage: bench_ledger_versions.py DIR [--json]", file=sys.stderr)
        return 2
    d = Path(rest[0])
    logs = sorted(d.glob("*.log")) if d.is_dir() else []
    if not logs:
        print(f"bench_ledger_versions: no *.log files in {d} ({'missing' if not d.exists() else 'empty'}); "
              "give a directory of vLLM logs (e.g. ../shared/fixtures/vllm-logs)", file=sys.stderr)
        return 2
    rows = [r for f in logs for r in evaluate(f)]
    if as_json:
        print(json.dumps(rows, indent=1))
        return 0
    planned = [r for r in rows if "skip" not in r]
    w = max(len(r["log"]) for r in rows)
    print(f"{'log':<{w}}  {'vLLM':>8}  {'range':<26}  {'vLLM KV':>12}  {'plan KV':>12}  error")
    for r in planned:
        fmt = "{:,.0f}" if r["unit"] == "tokens" else "{:.2f} GiB"
        print(f"{r['log']:<{w}}  {r['version']:>8}  {r['range']:<26}  {fmt.format(r['vllm']):>12}  "
              f"{fmt.format(r['plan']):>12}  {r['error_pct']:+.2f} %")
    for r in rows:
        if "skip" in r:
            print(f"{r['log']:<{w}}  skipped: {r['skip']}")
    errs = [abs(r["error_pct"]) for r in planned if r["error_pct"] is not None]
    if errs:
        print(f"\n{len(errs)} planned, worst {max(errs):.2f} %, mean |error| {sum(errs) / len(errs):.2f} %; "
              f"{len(rows) - len(planned)} skipped")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
