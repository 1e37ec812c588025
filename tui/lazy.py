"""Modules the console's worker threads import on first use, one thread at a time.

Two threads importing the same package at once (the plan and the profiles' verdicts both reach
`backend.ledger`, whose modules import one another) can each be handed the other's half-built module:
`ImportError: cannot import name ... from partially initialized module`. A console test saw it.
"""

from __future__ import annotations

import importlib
import threading
from types import ModuleType

_LOCK = threading.Lock()


def load(*names: str) -> ModuleType:
    """Import `names` in order under one lock; the last one's module."""
    with _LOCK:
        module = None
        for name in names:
            module = importlib.import_module(name)
    assert module is not None, "load() needs a module name"
    return module
