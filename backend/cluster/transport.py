"""How a command reaches a box: the argv of its own `qwen-tui ... --json`, run here or over ssh.

local: `<qwen_tui> [--config C] ARGS` as a child of this process, with the box's `env` added (tests
give each local box its own QWEN_TUI_HOME). ssh: `<ssh prefix> '<qwen_tui> [--config C] ARGS'`,
one shell string for the remote shell, each word quoted; a leading `~/` is left to the remote shell.
The prefix is any argv that runs a shell string, so tests use `["sh", "-c"]` for a "remote" box.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from dataclasses import dataclass
from typing import Any

from backend.cluster.config import Box, default_qwen_tui
from backend.spawn import Origin, command


@dataclass
class Answer:
    """What a box's command said: its JSON (None when it printed none), exit code, and the error
    to show when it could not be run or said nothing usable."""
    data: dict[str, Any] | None
    rc: int | None
    error: str | None = None
    stderr: str = ""


def _remote_word(word: str) -> str:
    if word.startswith("~/"):
        return "~/" + shlex.quote(word[2:])
    return shlex.quote(word)


def argv(box: Box, args: list[str]) -> list[str]:
    # the box's own config, never this run's (its path is the box's: not made absolute here)
    cmd = command(Origin(config=box.config or None), *args, prefix=box.qwen_tui or default_qwen_tui(box.transport))
    if box.transport == "local":
        return cmd
    return list(box.ssh) + [" ".join(_remote_word(w) for w in cmd)]


def env(box: Box) -> dict[str, str]:
    out = dict(os.environ)
    out.pop("QWEN_TUI_CONFIG", None)  # a box reads its own config, never the console's
    out.update(dict(box.env))
    return out


def run(box: Box, args: list[str], timeout: float) -> Answer:
    """Run one `qwen-tui ... --json` on the box; parse the one JSON object it prints."""
    cmd = argv(box, args)
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env(box),
                           stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        return Answer(None, None, f"{cmd[0]}: not found")
    except subprocess.TimeoutExpired:
        return Answer(None, None, f"no answer from {box.name} in {timeout:g} s ({shlex.join(cmd[:6])} ...)")
    except OSError as e:
        return Answer(None, None, f"cannot run {cmd[0]}: {e.strerror}")
    text = p.stdout.strip()
    start = text.find("{")
    data = None
    if start >= 0:
        try:
            data = json.loads(text[start:])
        except ValueError:
            data = None
    if not isinstance(data, dict):
        tail = (p.stderr.strip().splitlines() or [f"exit code {p.returncode}, no JSON on its output"])[-1]
        return Answer(None, p.returncode, f"{box.name}: {tail[:300]}", p.stderr)
    return Answer(data, p.returncode, None, p.stderr)
