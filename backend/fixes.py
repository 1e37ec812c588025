"""One-key fixes (issue 30): a diagnosis whose fix is a settings change, carried as data.

`propose(failure, settings)` turns a failure ({"kind", "message", "fix"}, as the log parser and the
state file have it) into a `Proposal`: the changes (section, key, old -> new value, or a [server.env]
entry), why, the ledger's verdict of the settings with the changes made, and `blocked` when the key
must not apply it (the ledger says it fails too; the value comes from --set, a profile or --demo, so a
save would not reach the next start). `apply(proposal, settings)` saves the changes into the config
file in use (backend.settings.save_setting: comments kept, atomic) and reads the settings again.

The numbers come from what vLLM printed (its KV estimate, the free memory it saw), the ledger's
arithmetic where vLLM printed none, and a bind probe for a port. Nothing here starts or stops a server.
"""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from backend import record
from backend.logparse.diagnose import CPU_KV, cpu_utilization_floor
from backend.server.ports import probe_bind
from backend.settings import Settings, save_setting

GiB = 1 << 30
UTIL_CAP = 0.95  # the most of a device's memory a fix hands to vLLM
UTIL_MARGIN = 0.02  # over the lowest utilization the ledger fits
PORT_TRIES = 50


@dataclass(frozen=True)
class Change:
    section: str  # "server", "server.env", ...
    key: str
    value: Any
    old: Any = None

    @property
    def dotted(self) -> str:
        return f"{self.section}.{self.key}"

    def diff(self) -> str:
        def shown(v: Any) -> str:
            return "(unset)" if v is None else (str(v).lower() if isinstance(v, bool) else
                                                 f'"{v}"' if isinstance(v, str) else str(v))

        return f"{self.dotted}: {shown(self.old)} -> {shown(self.value)}"

    def to_dict(self) -> dict[str, Any]:
        return {"section": self.section, "key": self.key, "value": self.value, "old": self.old,
                "setting": self.dotted, "diff": self.diff()}


@dataclass
class Proposal:
    kind: str
    why: str
    changes: list[Change]
    target: str | None = None  # the config file a save writes
    verdict: dict[str, Any] | None = None  # the ledger on the fixed settings: fits (True/False/None), text
    blocked: str | None = None  # why the key does not apply it
    notes: list[str] = field(default_factory=list)

    @property
    def applicable(self) -> bool:
        return self.blocked is None

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "why": self.why, "changes": [c.to_dict() for c in self.changes],
                "diff": [c.diff() for c in self.changes], "target": self.target, "verdict": self.verdict,
                "applicable": self.applicable, "blocked": self.blocked, "notes": self.notes}


# -- what each kind changes -----------------------------------------------------------------------
_KV_EST = re.compile(r"estimated maximum model length is (\d+)")
_KV_V0 = re.compile(r"in KV cache \((\d+)\)")
_KV_NEED = re.compile(r"max seq len \((\d+)\), \(([\d.]+) ?Gi?B KV.*?available KV cache memory \(([\d.]+) ?Gi?B\)")
_MAXLEN = re.compile(r"derived max_model_len \(\w+=([\d.]+)")
_FREE = re.compile(r"\(([\d.]+)/([\d.]+) GiB\) on startup is less than")


def _util(settings: Settings) -> float:
    u = settings.server_cfg.gpu_memory_utilization
    return float(u) if isinstance(u, (int, float)) else 0.9  # vLLM's default


def _fits_in(free: float, total: float) -> float:
    """A utilization that fits in `free` of `total`, 2 points of margin, rounded down."""
    return max(0.05, math.floor((free / total - 0.02) * 100 + 1e-9) / 100)


Build = Callable[[Mapping[str, Any], Settings, "Facts"], "tuple[list[Change], str] | None"]


@dataclass
class Facts:
    """The outside world, replaceable in tests: a bind probe and the ledger."""

    bind: Callable[[str, int], OSError | None] = probe_bind
    ledger: Callable[[Settings], Any] | None = None  # settings -> backend.ledger Ledger (raises LedgerInputError)

    # (NVML cards, vLLM version), read once per proposal
    _box: tuple[list[dict[str, Any]] | None, str | None] | None = field(default=None, init=False, repr=False)

    def plan(self, settings: Settings) -> Any:
        if self.ledger is not None:
            return self.ledger(settings)
        # only for a verdict: the ledger reads the model's config (tens of ms)
        from backend.ledger import plan_from_settings
        from backend.ledger.cli import this_box

        if self._box is None:
            # the plan `qwen-tui plan` makes, so that this box's learned launches and warm compile cache count
            # (without the version the H200's verdict was the cold model's, -9.4 %)
            self._box = this_box(settings)
        gpus, version = self._box
        return plan_from_settings(settings, gpus=gpus, vllm_version=version, check_free=False)


def _kv(failure: Mapping[str, Any], settings: Settings, facts: Facts) -> tuple[list[Change], str] | None:
    msg = str(failure.get("message") or "")
    old = settings.server_cfg.max_model_len
    new: int | None = None
    if m := _KV_EST.search(msg):
        new, why = int(m.group(1)), f"vLLM estimated {int(m.group(1)):,} tokens as the longest that fits"
    elif m := _KV_V0.search(msg):
        new, why = int(m.group(1)), f"the KV cache holds {int(m.group(1)):,} tokens"
    elif m := _KV_NEED.search(msg):
        need, avail = float(m.group(2)), float(m.group(3))
        if need > 0:
            new = int(int(m.group(1)) * avail / need) // 16 * 16
            why = f"{avail:g} of the {need:g} GiB needed for {int(m.group(1)):,} tokens is available"
    if not new or new <= 0:
        return None
    return [Change("server", "max_model_len", new, old)], f"the KV cache cannot hold one request: {why}"


def _util_search(settings: Settings, facts: Facts, start: float) -> tuple[float | None, str]:
    """The lowest utilization from `start` up to UTIL_CAP at which the ledger says the settings fit
    (more memory never makes a plan fail: a binary search over whole percents)."""
    def plan(pct: int) -> Any:
        return facts.plan(_with(settings, [Change("server", "gpu_memory_utilization", pct / 100)]))

    lo, hi = max(1, math.ceil(start * 100 - 1e-9)), round(UTIL_CAP * 100)
    if lo > hi:
        return None, f"more than {UTIL_CAP:g} would be needed"
    try:
        top = plan(hi)
        if not top.fits:
            last = next((p.message for p in top.problems if p.severity == "error"), "")
            return None, f"the ledger says no utilization up to {UTIL_CAP:g} fits: {last}"
        while lo < hi:
            mid = (lo + hi) // 2
            if plan(mid).fits:
                hi = mid
            else:
                lo = mid + 1
    except Exception as e:  # noqa: BLE001 - no plan: the measured floor is all there is
        return None, f"no plan ({e})"
    return hi / 100, ""


def _no_cache(failure: Mapping[str, Any], settings: Settings, facts: Facts) -> tuple[list[Change], str] | None:
    msg = str(failure.get("message") or "")
    floor = _util(settings) + 0.01
    why = "no memory is left for the KV cache once the weights and activations are in"
    if m := CPU_KV.search(msg):  # the CPU build: requested - consumed <= 0 (vllm/v1/worker/cpu_worker.py)
        total, for_kv, requested = float(m.group(2)), float(m.group(3)), float(m.group(4))
        consumed = requested - for_kv
        floor = max(floor, cpu_utilization_floor(consumed, total) or floor)
        why = (f"the worker's own {consumed:.2f} GiB is more than the {requested:.2f} GiB that "
               f"gpu_memory_utilization {_util(settings):g} reserves of {total:g} GiB: nothing is left for the "
               "KV cache")
    return _more_util(settings, facts, floor, why)


def _more_util(settings: Settings, facts: Facts, floor: float, why: str) -> tuple[list[Change], str]:
    """Raise the utilization to the least the ledger fits from `floor` (plus its margin), or to the cap."""
    old = settings.server_cfg.gpu_memory_utilization
    new, problem = _util_search(settings, facts, floor)
    if new is not None:  # 2 points over the edge: the ledger's own error, a cold compile's extra activations
        why += f"; the ledger fits it from {new:g}, 2 points more for its error"
        new = round(min(UTIL_CAP, new + UTIL_MARGIN), 2)
    if new is None:
        if problem.startswith("no plan"):
            new = round(min(UTIL_CAP, math.ceil(floor * 100 - 1e-9) / 100), 2)  # the measured floor alone
        else:
            return [Change("server", "gpu_memory_utilization", UTIL_CAP, old)], f"{why}; {problem}"
    return [Change("server", "gpu_memory_utilization", new, old)], why


def _less_util(failure: Mapping[str, Any], settings: Settings, facts: Facts) -> tuple[list[Change], str] | None:
    msg = str(failure.get("message") or "")
    m = _FREE.search(msg) or CPU_KV.search(msg)
    if not m:
        return None
    free, total = float(m.group(1)), float(m.group(2))
    if total <= 0:
        return None
    what = "RAM" if failure.get("kind") == "cpu_memory" else "GPU memory"
    old = settings.server_cfg.gpu_memory_utilization
    return ([Change("server", "gpu_memory_utilization", _fits_in(free, total), old)],
            f"only {free:g} of {total:g} GiB of {what} is free")


def _p2p(failure: Mapping[str, Any], settings: Settings, facts: Facts) -> tuple[list[Change], str] | None:
    return ([Change("server.env", "NCCL_P2P_DISABLE", "1", settings.env.get("NCCL_P2P_DISABLE"))],
            "NCCL's peer-to-peer path fails between these GPUs: it goes through host memory instead")


def _port(failure: Mapping[str, Any], settings: Settings, facts: Facts) -> tuple[list[Change], str] | None:
    host, port = str(settings.server_cfg.host or "127.0.0.1"), int(settings.server_cfg.port or 8000)
    for p in range(port + 1, min(port + 1 + PORT_TRIES, 65536)):
        if facts.bind(host, p) is None:
            return [Change("server", "port", p, port)], f"port {port} is in use; {p} is free now"
    return None


def _max_len(failure: Mapping[str, Any], settings: Settings, facts: Facts) -> tuple[list[Change], str] | None:
    m = _MAXLEN.search(str(failure.get("message") or ""))
    if not m:
        return None
    new = int(float(m.group(1)))
    return ([Change("server", "max_model_len", new, settings.server_cfg.max_model_len)],
            f"the model handles {new:,} tokens")


def _bf16(failure: Mapping[str, Any], settings: Settings, facts: Facts) -> tuple[list[Change], str] | None:
    return ([Change("server", "dtype", "float16", settings.server_cfg.dtype)],
            "this GPU cannot run bfloat16")


def _graphs(failure: Mapping[str, Any], settings: Settings, facts: Facts) -> tuple[list[Change], str] | None:
    if not str(failure.get("fix") or "").startswith("CUDA graph capture ran out of memory"):
        return None
    return ([Change("server", "enforce_eager", True, settings.server_cfg.enforce_eager)],
            "CUDA graph capture ran out of memory: no graphs, a slower decode")


def cpu_binding(tp: int, cores: list[int]) -> str | None:
    """VLLM_CPU_OMP_THREADS_BIND for `tp` ranks over `cores`: contiguous groups, '|' between ranks."""
    if tp < 1 or len(cores) < tp:
        return None
    per = len(cores) // tp
    groups = [sorted(cores)[i * per:(i + 1) * per] for i in range(tp)]
    return "|".join(f"{g[0]}-{g[-1]}" if len(g) > 1 else str(g[0]) for g in groups)


def _numa(failure: Mapping[str, Any], settings: Settings, facts: Facts) -> tuple[list[Change], str] | None:
    import os  # sched_getaffinity: Linux only, and only this kind needs it

    tp = int(settings.server_cfg.tensor_parallel_size or 1) * int(settings.server_cfg.pipeline_parallel_size or 1)
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    bind = cpu_binding(tp, cores)
    try:  # the launch's own binding (issue 25's backend/server/cpu_bind.py) where this checkout has it
        from backend.server import cpu_bind  # type: ignore[attr-defined, unused-ignore]

        bind = cpu_bind.binding(cores, tp) if len(cores) >= tp >= 1 else None
    except ImportError:
        pass
    if bind is None:
        return None
    return ([Change("server.env", "VLLM_CPU_OMP_THREADS_BIND", bind, settings.env.get("VLLM_CPU_OMP_THREADS_BIND"))],
            f"vLLM's CPU build cannot bind {tp} ranks' threads by itself here: one group of cores per rank")


BUILDERS: dict[str, Build] = {
    "kv_cache_too_small": _kv, "no_cache_memory": _no_cache, "cpu_memory": _less_util,
    "memory_in_use": _less_util, "nccl_p2p": _p2p, "port_in_use": _port, "max_len_exceeds_model": _max_len,
    "bf16_unsupported": _bf16, "oom_runtime": _graphs, "numa_binding": _numa, "cpu_binding": _numa,
}


# -- settings with the changes, where they come from, the ledger's word ----------------------------
def _with(settings: Settings, changes: list[Change]) -> Settings:
    server = copy.deepcopy(settings.server)
    for c in changes:
        if c.section == "server.env":
            server["env"] = {**(server.get("env") or {}), c.key: c.value}
        elif c.section == "server":
            server[c.key] = c.value
    return record.replace(settings, server=server)


def origin_block(settings: Settings, changes: list[Change]) -> str | None:
    """Why a save into the file would not reach the next start: the value is this run's --set, its
    profile's or --demo's. Says what to change instead."""
    from backend.setting_rows import demo_keys, profile_keys, set_keys  # the settings screen's own rules

    sets, profile, demo = set_keys(settings), profile_keys(settings), demo_keys(settings)
    for c in changes:
        sec, key = ("server", "env") if c.section == "server.env" else (c.section, c.key)
        flag = next((t for t in settings.overrides if t.split("=", 1)[0].strip() == c.dotted), None)
        if c.section != "server.env":
            flag = sets.get((sec, key))
        if flag:
            return (f"{c.dotted} comes from `--set {flag}` for this run: change that to "
                    f"--set {c.dotted}={_toml(c.value)} (a save into the file would not be used)")
        if (sec, key) in profile and c.section != "server.env":
            return (f"{c.dotted} comes from the profile {settings.profile!r}: set {key} = {_toml(c.value)} in "
                    f"[profiles.{settings.profile}] of the config file, or start without --profile")
        if (sec, key) in demo:  # --demo replaces [server] whole, [server.env] too
            return (f"{c.dotted} is --demo's, whatever the file says: run --demo with "
                    f"--set {c.dotted}={_toml(c.value)}, or serve from a config file without --demo")
    return None


def _toml(v: Any) -> str:
    return str(v).lower() if isinstance(v, bool) else (f'"{v}"' if isinstance(v, str) else str(v))


def ledger_verdict(fixed: Settings, changes: list[Change], facts: Facts) -> dict[str, Any]:
    """{"fits": True | False | None, "text", ...}: the ledger on the fixed settings (None: no plan)."""
    try:
        led = facts.plan(fixed)
    except Exception as e:  # noqa: BLE001 - no plan (an unknown model): the ledger cannot say it fails
        return {"fits": None, "text": f"no plan for these settings: {e}"}
    errors = [p.message for p in led.problems if p.severity == "error"]
    want = next((c.value for c in changes if c.key == "max_model_len"), None)
    if not errors and want is not None and led.max_model_len_that_fits and led.max_model_len_that_fits < want:
        errors = [f"the KV cache holds {led.max_model_len_that_fits:,} tokens, less than max_model_len {want:,}"]
    out = {"fits": not errors, "kv_cache_tokens": led.kv_cache_tokens,
           "max_concurrency": round(led.max_concurrency, 2), "max_model_len_that_fits": led.max_model_len_that_fits}
    if errors:
        return {**out, "text": f"the ledger says it fails too: {errors[0]}"}
    return {**out, "text": f"the ledger says it fits: {led.kv_cache_tokens:,} KV tokens, "
                           f"{led.max_concurrency:.1f} requests of max_model_len at once"}


def propose(failure: Mapping[str, Any] | None, settings: Settings, facts: Facts | None = None) -> Proposal | None:
    """The fix of this failure as data, or None when its fix is no settings change. Never raises."""
    if not failure:
        return None
    facts = facts or Facts()
    kind = str(failure.get("kind") or "")
    build = BUILDERS.get(kind)
    try:
        built = build(failure, settings, facts) if build else None
    except Exception:  # noqa: BLE001 - a fix we cannot compute is no fix, never a crash
        return None
    if not built:
        return None
    return _finish(kind, built, settings, facts)


# The ledger's blocking problems before a launch, by the failure kind vLLM would report for each: the
# preflight dialog offers the same one-key fix as the failure banner would after a wasted start.
PLAN_KINDS = {"weights-exceed-budget": "no_cache_memory", "no-kv-cache-memory": "no_cache_memory",
              "kv-cache-too-small-for-max-model-len": "kv_cache_too_small"}


def propose_for_plan(plan: Mapping[str, Any] | None, settings: Settings,
                     facts: Facts | None = None) -> Proposal | None:
    """The fix of the first blocking problem of a plan (`plan --json`'s dict) that a settings change
    fixes, as data, with the ledger's verdict; None when none is. Never raises."""
    facts = facts or Facts()
    for problem in (plan or {}).get("problems") or []:
        kind = PLAN_KINDS.get(str(problem.get("kind")))
        if problem.get("severity") != "error" or kind is None:
            continue
        try:
            if kind == "kv_cache_too_small":
                fits = int((plan or {}).get("max_model_len_that_fits") or 0)
                built = ([Change("server", "max_model_len", fits, settings.server_cfg.max_model_len)],
                         f"the ledger's KV cache holds one request of {fits:,} tokens") if fits > 0 else None
            else:
                built = _more_util(settings, facts, _util(settings) + 0.01,
                                   f"the ledger says: {problem.get('message') or problem.get('kind')}")
            if built:
                return _finish(kind, built, settings, facts)
        except Exception:  # noqa: BLE001 - a fix we cannot compute is no fix, never a crash
            continue
    return None


def _finish(kind: str, built: tuple[list[Change], str], settings: Settings, facts: Facts) -> Proposal:
    """The proposal of these changes: where it is saved, the ledger's verdict, why the key may not apply it."""
    changes, why = built
    from backend.setting_rows import config_target  # where the settings screen saves too

    prop = Proposal(kind, why, changes, target=str(config_target(settings)))
    prop.verdict = ledger_verdict(_with(settings, changes), changes, facts)
    lower = prop.verdict.get("max_model_len_that_fits")
    if prop.verdict["fits"] is False and kind == "kv_cache_too_small" and lower and lower > 0:
        # the ledger's own capacity is lower than vLLM's estimate: the largest that both say fits
        changes = [replace(changes[0], value=int(lower))]
        prop.changes = changes
        prop.notes.append(f"the ledger's KV cache holds fewer tokens than vLLM estimated: {lower:,}")
        prop.verdict = ledger_verdict(_with(settings, changes), changes, facts)
    if prop.verdict["fits"] is False:
        prop.blocked = prop.verdict["text"]
    elif all(c.old == c.value for c in changes):
        prop.blocked = "the settings already have this value: the fix is elsewhere (read the log)"
    else:
        prop.blocked = origin_block(settings, changes)
    return prop


# -- applying it ---------------------------------------------------------------------------------
def apply(prop: Proposal, settings: Settings) -> tuple[Path, Settings]:
    """Save every change into the config file in use and read the settings again. Raises ConfigError
    (nothing written for a change that fails; earlier ones stay saved) or ValueError when blocked."""
    if not prop.applicable:
        raise ValueError(f"not applied: {prop.blocked}")
    from backend.setting_rows import config_target, file_data, reload  # the settings screen's save rules

    path = config_target(settings)
    for c in prop.changes:
        if c.section == "server.env":
            env = dict(((file_data(path).get("server") or {}).get("env")) or {})
            env[c.key] = c.value
            save_setting(path, "server", "env", env)
        else:
            save_setting(path, c.section, c.key, c.value)
    return path, reload(settings, path)
