"""Memory ledger (`qwen-tui plan`): weights, KV cache and concurrency before a slow launch fails.

Public API:
    plan(shape, params, cards) -> Ledger          pure function over plain values (core.py)
    plan_from_settings(settings, gpus=None, vllm_version=None, check_free=True) -> Ledger
    resolve_shape(model, download_dir=None) -> ModelShape   local folder / HF cache / built-in table
    lookup(model_id) -> ModelShape | None         the built-in table (Qwen2.5 0.5B-72B and others)
    kv_bytes_per_token(shape, kv_dtype_size, tp=1) -> int
    max_concurrency(blocks, block_size, max_model_len, vllm_version=None) -> float
    compare(predicted, parsed) -> list[dict]      plan vs what vLLM printed
    run_plan(settings, as_json, out=sys.stdout, gpus=None) -> int   the CLI (cli.py)

backend/ must not import textual; nothing here does.
"""

from typing import Any

from backend.ledger import learned
from backend.ledger.adapter import (
    LedgerInputError,
    cards_from,
    params_from_settings,
    plan_for_console,
    plan_from_settings,
    resolve_shape,
)
from backend.ledger.compare import compare
from backend.ledger.core import (
    Card,
    Ledger,
    PlanParams,
    Problem,
    kv_bytes_per_token,
    max_concurrency,
    plan,
    valid_tp_sizes,
)
from backend.ledger.shapes import ModelShape, QuantSpec, from_config, lookup, param_count
from backend.settings import Settings

__all__ = [
    "plan_for_console",
    "Card", "Ledger", "LedgerInputError", "ModelShape", "PlanParams", "Problem", "QuantSpec",
    "cards_from", "compare", "learned", "from_config", "kv_bytes_per_token", "lookup", "max_concurrency",
    "param_count",
    "params_from_settings", "plan", "plan_from_settings", "resolve_shape", "run_plan",
    "valid_tp_sizes",
]


def run_plan(settings: Settings, as_json: bool, out: Any = None, gpus: Any = None) -> int:  # see cli.run_plan
    import sys  # `python -m backend.ledger` only

    from backend.ledger.cli import run_plan as _run  # `python -m backend.ledger` only

    return _run(settings, as_json, out if out is not None else sys.stdout, gpus)
