"""`qwen-tui bench --url URL`: the load test against another server (the cluster's router), plus
each box's share of the requests: the delta of `vllm:request_success_total` on each box's own
/metrics over the run (the router's /get_loads is not used: it asks an SGLang endpoint).
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from backend.bench.loadtest import BenchConfig, BenchInputError, ProgressFn, run_bench, write_report
from backend.bench.summary import summary_lines
from backend.cluster import ops
from backend.cluster.config import check_url, load_cluster
from backend.errors import ConfigError
from backend.httpclient import sync_client
from backend.settings import Settings


def served_model(url: str, wanted: str, api_key: str | None) -> tuple[str, str | None]:
    """The model to ask for at `url`: the configured name when served there, else the first one."""
    try:
        with sync_client(api_key=api_key, timeout=5.0) as c:
            ids = [m.get("id") for m in c.get(url + "/v1/models").json().get("data") or []]
    except Exception:  # the run itself says what is wrong with the server
        return wanted, None
    if wanted in ids or not ids:
        return wanted, None
    return str(ids[0]), f"{url} does not serve {wanted!r}; asked for {ids[0]!r}, its first model"


def run(settings: Settings, cfg: BenchConfig, url: str, on_progress: ProgressFn | None = None) -> dict[str, Any]:
    url = check_url(url, "--url")
    cluster = load_cluster(settings)
    model, note = served_model(url, settings.served_name, settings.api_key)
    before = ops.totals(cluster) if cluster else None
    rep = asyncio.run(run_bench(settings, cfg, on_progress, base_url=url, model=model))
    if note:
        rep["notes"] = [note] + list(rep.get("notes") or [])
    if cluster is not None and before is not None:
        rep["per_box"] = ops.share_between(before, ops.totals(cluster))
        counted = sum(v["requests"] or 0 for v in rep["per_box"].values())
        sent = rep["completed"] + (1 if cfg.warmup else 0)
        if counted < sent:
            rep["notes"].append(f"the boxes count {counted} of the {sent} requests sent (warm-up included): a box "
                                "restarted during the run counts only those since its restart")
    return rep


def per_box_lines(rep: dict[str, Any]) -> list[str]:
    per = rep.get("per_box")
    if not per:
        return []
    parts = [f"{name} {v['requests'] if v['requests'] is not None else '?'} "
             f"({'?' if v['share'] is None else format(v['share'] * 100, '.0f')} %)" for name, v in per.items()]
    return ["per box (vllm:request_success_total delta): " + ", ".join(parts)]


def run_url(settings: Settings, cfg: BenchConfig, url: str, as_json: bool, out: Any = None, err: Any = None) -> int:
    from backend.bench.loadtest import _progress_printer  # only this path needs it (start-up, or a cycle)

    out, err = out or sys.stdout, err or sys.stderr
    try:
        cfg.check()
        rep = run(settings, cfg, url, None if as_json else _progress_printer(err))
    except (BenchInputError, ConfigError) as e:
        err.write(f"qwen-tui: {e}\n")
        return 2
    return write_report(rep, cfg, as_json, out, err, lambda r: summary_lines(r) + per_box_lines(r))
