"""The settings screen's live preview: the ledger for a value being typed, before anything is saved.

`preview(settings, section, key, text)` parses the text as the editor would save it, plans these
settings with that one value changed (pure: no file written, no launch) and says whether it fits,
the KV tokens, max concurrency and the largest max_model_len that fits, and, for a value that
would fail to start, the problem and its fix. `LEDGER_KEYS` are the keys the ledger reads.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from backend.errors import ConfigError
from backend.settings import SCHEMA, Settings

LEDGER_KEYS: frozenset[tuple[str, str]] = frozenset(
    {("server", k) for k in ("model", "dtype", "kv_cache_dtype", "tensor_parallel_size", "pipeline_parallel_size",
                             "gpu_memory_utilization", "kv_cache_memory_bytes", "max_model_len", "max_num_seqs",
                             "max_num_batched_tokens", "block_size", "enforce_eager", "quantization",
                             "cpu_offload_gb", "download_dir", "env")}
    | {("planner", k) for k in SCHEMA["planner"]})


def reads(section: str, key: str) -> bool:
    """Whether the ledger reads this key (a change moves the preview)."""
    return (section, key) in LEDGER_KEYS


def _n(v: int | None) -> str:
    return "?" if v is None else f"{v:,}"


def longest_len_text(fits: int | None, kv_tokens: int | None) -> str:
    """The largest max_model_len, saying which bound set it: the KV memory, or the model's own
    limit (max_position_embeddings) when memory would hold more."""
    if fits is None:
        return "largest max_model_len unknown"
    if kv_tokens is not None and fits < kv_tokens:
        return f"largest max_model_len {fits:,} (the model's limit; memory holds {kv_tokens:,} tokens)"
    return f"largest max_model_len that fits in memory {fits:,}"


@dataclass
class Preview:
    dotted: str
    text: str
    invalid: str | None = None  # the text is not a value for this key: why
    fits: bool | None = None
    kv_cache_tokens: int | None = None
    max_concurrency: float | None = None
    max_model_len: int | None = None
    max_model_len_that_fits: int | None = None
    errors: list[dict[str, str]] = field(default_factory=list)  # would fail to start: message, fix
    warnings: list[dict[str, str]] = field(default_factory=list)
    note: str = ""  # e.g. this run keeps a --set value
    no_plan: str | None = None  # the ledger could not plan it (model not resolvable ...)

    def lines(self) -> list[str]:
        """The preview in words, first line the verdict."""
        if self.invalid:
            return [f"preview: not a value for {self.dotted}: {self.invalid}"]
        if self.no_plan:
            return [f"preview: no plan for {self.dotted} = {self.text or '(unset)'}: {self.no_plan}"]
        mc = f"{self.max_concurrency:.2f}x" if self.max_concurrency is not None else "?"
        head = (f"preview {self.dotted} = {self.text or '(unset)'}: "
                + ("fits" if self.fits else "would FAIL to start")
                + f" · KV {_n(self.kv_cache_tokens)} tokens · max concurrency {mc} at "
                f"{_n(self.max_model_len)} · {longest_len_text(self.max_model_len_that_fits, self.kv_cache_tokens)}")
        out = [head]
        out += [f"  ✗ {p['message']}\n    fix: {p['fix']}" for p in self.errors]
        out += [f"  ⚠ {p['message']}" for p in self.warnings[:2]]
        if self.note:
            out.append(f"  {self.note}")
        return out


def with_value(settings: Settings, section: str, key: str, text: str) -> tuple[Settings, str]:
    """A copy of `settings` with the typed value in place (the file and the running server untouched),
    and a note when this run forces the key anyway. Raises ConfigError for text that is not a value."""
    # only for the CLI or a real install: plan() stays a pure function
    from backend.setting_rows import parse_text, set_keys

    edit = parse_text(section, key, text)
    new = copy.deepcopy(settings)
    table = getattr(new, section)
    table[key] = copy.deepcopy(SCHEMA[section][key].default) if edit.unset else edit.value
    note = ""
    given = set_keys(settings).get((section, key))
    forced = f"--set {given}" if given else None  # a demo value is not forced: saves go to its settings file
    prof = (settings.profiles or {}).get(settings.profile or "", {}) if section == "server" else {}
    if forced:
        note = f"this run keeps its {forced} value; the preview plans the typed one"
    elif key in prof:
        note = f"profile {settings.profile} sets {key} for this run; the preview plans the typed value"
    return new, note


def preview(settings: Settings, section: str, key: str, text: str, gpus: list[dict[str, Any]] | None = None,
            vllm_version: str | None = None) -> Preview:
    """Never raises: a bad value or an unplannable one is said in the Preview."""
    # only for the CLI or a real install: plan() stays a pure function
    from backend.ledger.adapter import LedgerInputError, plan_from_settings

    p = Preview(f"{section}.{key}", text.strip())
    try:
        new, p.note = with_value(settings, section, key, text)
    except ConfigError as e:
        p.invalid = str(e)
        return p
    try:
        led = plan_from_settings(new, gpus=gpus, vllm_version=vllm_version, check_free=False)
    except LedgerInputError as e:
        p.no_plan = str(e)
        return p
    except Exception as e:  # noqa: BLE001 - the preview must say something, never crash the screen
        p.no_plan = f"{type(e).__name__}: {e}"
        return p
    p.fits, p.kv_cache_tokens = led.fits, led.kv_cache_tokens
    p.max_concurrency, p.max_model_len = led.max_concurrency, led.max_model_len
    p.max_model_len_that_fits = led.max_model_len_that_fits
    p.errors = [q.to_dict() for q in led.problems if q.severity == "error"]
    p.warnings = [q.to_dict() for q in led.problems if q.severity != "error"]
    return p
