"""Workload profiles as data: the built-in ones and how an overlay of [server] keys applies
(backend/profiles.py explains them; settings.load() applies one, settings.check_profiles validates
the file's). Nothing here imports the settings, so both the settings and profiles.py can use it."""

from __future__ import annotations

import copy
import re
from typing import Any

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,39}\Z")

BUILTIN: dict[str, dict[str, Any]] = {
    "chat": {"description": "interactive chat: 8K context, about 8 sequences at once",
             "max_model_len": 8192, "max_num_seqs": 8},
    "long": {"description": "long documents: 32K context, 2 sequences",
             "max_model_len": 32768, "max_num_seqs": 2},
    "batch": {"description": "batch jobs: 4K context, 32 sequences",
              "max_model_len": 4096, "max_num_seqs": 32},
}


def merged(file_profiles: dict[str, dict[str, Any]] | None) -> dict[str, dict[str, Any]]:
    """The built-in profiles with the file's (a file table replaces the built-in of its name)."""
    out = copy.deepcopy(BUILTIN)
    out.update(copy.deepcopy(file_profiles or {}))
    return out


def overlay_of(profile: dict[str, Any]) -> dict[str, Any]:
    """The [server] keys a profile sets (its description left out)."""
    return {k: v for k, v in profile.items() if k != "description"}


def apply(server: dict[str, Any], profile: dict[str, Any]) -> None:
    for key, value in overlay_of(profile).items():
        server[key] = copy.deepcopy(value)


def unknown(name: str, known: dict[str, Any]) -> str:
    return (f"unknown profile {name!r} (known: {', '.join(known) or 'none'}); add a [profiles.{name}] "
            "table of [server] keys to config.toml")
