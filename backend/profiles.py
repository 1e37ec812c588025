"""Workload profiles: named overlays of `[server]` keys (`[profiles.NAME]` in config.toml).

A profile changes only the keys it names; everything else comes from `[server]` (and --demo).
Precedence of one run: defaults < the file's [server] < --demo < the profile < --set.
Three ship built in with the values the seeds run (chat: 8K context, 8 sequences; long: 32K, 2;
batch: 4K, 32); a `[profiles.NAME]` table in the file replaces the built-in one of that name, and
any other name adds a profile. `description` is the one key that is not a [server] key.

`verdicts(settings, gpus)` plans every profile with the memory ledger (pure, no launch): fits?,
KV tokens, max concurrency at its max_model_len, the largest max_model_len that fits, what it warns.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from backend.errors import ConfigError
from backend.profile_overlays import BUILTIN, NAME, apply, merged, overlay_of, unknown
from backend.setting_rows import toml_text
from backend.settings import Settings, check_profiles
from backend.spawn import origin_of

# their homes: profile_overlays (the data) and settings (the check)
__all__ = ["BUILTIN", "NAME", "apply", "check_profiles", "merged", "overlay_of", "unknown"]


def overlay_text(profile: dict[str, Any]) -> str:

    return ", ".join(f"{k} = {toml_text(v)}" for k, v in overlay_of(profile).items()) or "no changes"


# -- the ledger's verdict per profile ---------------------------------------------------------------
@dataclass
class Verdict:
    name: str
    description: str
    overlay: dict[str, Any]
    active: bool = False
    fits: bool | None = None
    kv_cache_tokens: int | None = None
    max_concurrency: float | None = None
    max_model_len: int | None = None
    max_num_seqs: int | None = None
    max_model_len_that_fits: int | None = None
    problems: list[dict[str, str]] = field(default_factory=list)
    error: str | None = None  # no plan: why

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @property
    def warnings(self) -> list[str]:
        return [p["message"] for p in self.problems]

    def summary(self) -> str:
        """One line: fits, KV tokens, concurrency at its length."""
        if self.error:
            return f"no plan: {self.error}"
        fits = "fits" if self.fits else "does NOT fit"
        mc = f"{self.max_concurrency:.2f}x" if self.max_concurrency is not None else "?"
        kv = f"{self.kv_cache_tokens:,}" if self.kv_cache_tokens is not None else "?"
        return (f"{fits}: KV {kv} tokens, max concurrency {mc} at {self.max_model_len or '?':,} tokens, "
                f"max_num_seqs {self.max_num_seqs}")


def settings_for(settings: Settings, name: str | None) -> Settings:
    """These settings with profile `name` in place of the active one (None: no profile); --set still wins."""
    return origin_of(settings).with_profile(name).load()


def verdict(settings: Settings, name: str, gpus: list[dict[str, Any]] | None = None,
            vllm_version: str | None = None) -> Verdict:
    """The ledger's verdict on profile `name` over these settings (never raises)."""
    from backend.ledger import LedgerInputError, plan_from_settings  # the ledger only for a verdict: start-up

    prof = settings.profiles.get(name, {})
    v = Verdict(name, str(prof.get("description") or ""), overlay_of(prof), active=settings.profile == name)
    try:
        led = plan_from_settings(settings_for(settings, name), gpus=gpus, vllm_version=vllm_version,
                                 check_free=False).to_dict()
    except (LedgerInputError, ConfigError) as e:
        v.error = str(e)
        return v
    except Exception as e:  # noqa: BLE001 - a listing must say something, never crash
        v.error = f"{type(e).__name__}: {e}"
        return v
    v.fits, v.kv_cache_tokens = led["fits"], led["kv_cache_tokens"]
    v.max_concurrency, v.max_model_len = led["max_concurrency"], led["max_model_len"]
    v.max_num_seqs, v.max_model_len_that_fits = led["max_num_seqs"], led["max_model_len_that_fits"]
    v.problems = led["problems"]
    return v


def verdicts(settings: Settings, gpus: list[dict[str, Any]] | None = None,
             vllm_version: str | None = None) -> list[Verdict]:
    return [verdict(settings, name, gpus, vllm_version) for name in settings.profiles]


def run_cli(settings: Settings, as_json: bool, out: Any = None) -> int:
    """`qwen-tui profiles [--json]`: every profile with its verdict; 0 (a listing, whatever fits)."""
    import json  # the ledger only for a verdict: start-up
    import sys

    from backend.ledger.cli import this_box  # the ledger only for a verdict: start-up
    from backend.ledger.preview import longest_len_text

    out = out or sys.stdout
    found = verdicts(settings, *this_box(settings))
    if as_json:
        out.write(json.dumps({"active": settings.profile, "profiles": [v.to_dict() for v in found]}, indent=2) + "\n")
        return 0
    for v in found:
        out.write(f"{'*' if v.active else ' '} {v.name:<10} {overlay_text(settings.profiles[v.name])}"
                  + (f"  ({v.description})" if v.description else "") + "\n")
        out.write(f"    {v.summary()}" + (f"; {longest_len_text(v.max_model_len_that_fits, v.kv_cache_tokens)}"
                                            if v.max_model_len_that_fits else "") + "\n")
        for p in v.problems:
            out.write(f"    [{p['severity']}] {p['message']}\n      fix: {p['fix']}\n")
    out.write("\nuse one: qwen-tui --profile NAME <command> (or p in the console)\n")
    return 0
