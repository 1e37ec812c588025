"""`qwen-tui report`: one paste-ready Markdown document for a forum post or a vLLM issue.

What maintainers ask for first, in one place: versions (qwen-tui, vLLM, torch, CUDA, driver, Python), the
GPUs (name, memory, compute capability, P2P), the settings and the exact command line, the plan, the
doctor's results, the failure diagnosis with its fix and the attempts, the log lines around the failure (the
first error and its traceback, the figures lines and the last lines; never the whole log) and the server's
environment. Redacted by default (backend/redact.py); `--no-redact` keeps everything.

`gather()` collects plain data, `render()` writes the Markdown; `--json` prints {"markdown", "redacted",
"redactions", "report"} with the same data, redacted the same way.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

from backend import stacks
from backend.doctor import Env, run_checks
from backend.doctor.context import site_dirs
from backend.doctor.cuda_libs import _field, _metadata, detect
from backend.gpu import GpuMonitor
from backend.ledger.adapter import LedgerInputError, gpus_from_monitor, plan_from_settings
from backend.ledger.cli import detect_vllm_version, format_table
from backend.logparse import Failure, Figure, LogParser
from backend.redact import Redactor
from backend.server import client as supervisor_client
from backend.server import statefile
from backend.server.launch import build_launch, detect_install, python_for
from backend.server.orphans import configured_gpus
from backend.server.status import FAILING, in_group
from backend.settings import SCHEMA, Settings

EXCERPT_MAX = 160  # log lines in the report, all blocks together
TRACEBACK_MAX = 90  # lines of the first error's block
LINE_MAX = 400  # characters per log line
ENV_PREFIXES = ("VLLM_", "NCCL_", "CUDA_", "HF_", "TORCH_", "PYTORCH_", "TRANSFORMERS_", "OMP_", "LD_LIBRARY_PATH",
                "NVIDIA_")
_ERROR_LINE = re.compile(r"\b(?:ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d|^\s*(?:ERROR|CRITICAL):\s")
_PREFIX = re.compile(r"^(?:\([^)]*pid=\d+[^)]*\)\s*)?(?:(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d "
                     r"\d\d:\d\d:\d\d(?:[.,]\d+)? \[?[^\]\s]+\] ?)?(?:\[rank\d+\]:\s?)?")
_EXC_LINE = re.compile(r"(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt|Failure)?(?::\s|\s*$)")


# -- versions and GPUs --------------------------------------------------------------------------------
def _qwen_tui_version() -> str:
    try:
        version = metadata.version("qwen-tui")
    except metadata.PackageNotFoundError:
        version = "not installed as a package"
    try:
        rev = subprocess.run(["git", "-C", str(Path(__file__).resolve().parent.parent), "rev-parse", "--short",
                              "HEAD"], capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        rev = ""
    return f"{version} (git {rev})" if rev else version


def _dist_version(sites: list[str], name: str) -> str | None:

    for site in sites:
        if site and Path(site).is_dir():
            meta = _metadata(Path(site), name)
            if meta:
                versions = _field(meta, "Version")
                return versions[0] if versions else None
    return None


def versions(settings: Settings, monitor: Any) -> dict[str, Any]:

    install = detect_install(python_for(settings))
    sites = site_dirs(settings)
    cuda = detect(sites)
    return {
        "qwen_tui": _qwen_tui_version(),
        "vllm": f"{install.distribution} {install.version}" if install.distribution else "not installed",
        "vllm_python": install.python,
        "torch": _dist_version(sites, "torch") or "not installed",
        "cuda": (f"CUDA {cuda.major} ({cuda.source})" if cuda.major else
                 f"none ({cuda.source})" if cuda.cpu else f"unknown ({cuda.source})"),
        "driver": getattr(monitor, "driver_version", None) or "n/a",
        "cuda_driver": _cuda_text(getattr(monitor, "cuda_driver_version", None)),
        "python": f"{platform.python_version()} ({sys.executable})",
        "os": platform.platform(),
    }


def _cuda_text(v: int | None) -> str:
    return f"{v // 1000}.{v % 1000 // 10}" if isinstance(v, int) and v > 0 else "n/a"


def gpus(monitor: Any) -> dict[str, Any]:
    if monitor is None or not monitor.available():
        return {"available": False, "reason": getattr(monitor, "reason", None) or "NVML not used", "gpus": [],
                "p2p": []}
    return {"available": True, "reason": None,
            "gpus": [{"index": g.index, "name": g.name, "memory_gib": round(g.memory_total_bytes / 2**30, 2)
                      if g.memory_total_bytes else None,
                      "compute_capability": ".".join(map(str, g.compute_capability)) if g.compute_capability else None,
                      "pcie": f"Gen{g.pcie_gen_max} x{g.pcie_width_max}" if g.pcie_gen_max else None,
                      "nvlink_active_links": g.nvlink_active_links} for g in monitor.gpus],
            "p2p": [{"gpus": f"{p.gpu_a}-{p.gpu_b}", "read": p.read, "write": p.write, "topology": p.topology,
                     "ok": p.ok} for p in monitor.p2p]}


# -- settings, command, plan, doctor -----------------------------------------------------------------
def settings_view(settings: Settings) -> dict[str, Any]:
    """[server]: every key that is passed; the other sections: what differs from the defaults."""
    snap = settings.snapshot()
    out: dict[str, Any] = {"source": str(settings.source) if settings.source else None, "demo": settings.demo,
                           "overrides": list(settings.overrides)}
    for section, table in SCHEMA.items():
        values = snap[section]
        if section == "server":
            out[section] = {k: v for k, v in values.items() if v not in (None, [], {}) and k != "env"}
        else:
            out[section] = {k: v for k, v in values.items() if table.get(k) is None or v != table[k].default}
    return out


def command(settings: Settings, state: dict[str, Any]) -> dict[str, Any]:

    launch = build_launch(settings)
    out = {"shell": launch.shell_line(), "problems": launch.problems, "last_launch": None}
    argv, env = state.get("argv"), state.get("env")
    if argv:

        last = (" ".join(f"{k}={shlex.quote(str(v))}" for k, v in sorted((env or {}).items())) + " "
                + shlex.join(argv)).strip()
        if last != out["shell"]:
            out["last_launch"] = last
    return out


def plan_text(settings: Settings, monitor: Any) -> str:

    try:
        led = plan_from_settings(settings, gpus=gpus_from_monitor(monitor), vllm_version=detect_vllm_version(settings))
        return format_table(led)
    except LedgerInputError as e:
        return f"no plan: {e}"
    except Exception as e:  # noqa: BLE001 - a report says what broke, it never crashes
        return f"no plan: {type(e).__name__}: {e}"


def doctor(settings: Settings, monitor: Any) -> list[dict[str, Any]]:

    try:
        return [c.to_dict() for c in run_checks(settings, Env(monitor=monitor))]
    except Exception as e:  # noqa: BLE001
        return [{"name": "doctor", "status": "warn", "message": f"could not run: {type(e).__name__}: {e}", "fix": None}]


# -- the server and its log ---------------------------------------------------------------------------
def server(status: Mapping[str, Any]) -> dict[str, Any]:
    keep = ("state", "detail", "attempt", "restarts", "failure", "last_failure", "log_path", "vllm_version",
            "kv_cache_tokens", "kv_cache_gib", "max_concurrency", "weights_gib", "weights_seconds", "phase",
            "sleep_level", "gpu_memory_freed_bytes", "wake_seconds", "stop_report")
    out = {k: status.get(k) for k in keep}
    out["attempts"] = [{k: a.get(k) for k in ("attempt", "kind", "exit_code", "was_ready", "message", "fix",
                                              "log_path")} for a in status.get("attempts") or []]
    return out


def failing_log(status: Mapping[str, Any]) -> str | None:
    """The log to quote: the current launch's when it failed, else the last failed attempt's, else the current."""
    if in_group(status.get("state"), FAILING) or not status.get("last_failure"):
        return status.get("log_path") or (status.get("last_failure") or {}).get("log_path")
    return (status.get("last_failure") or {}).get("log_path") or status.get("log_path")


def _traceback_end(lines: list[str], start: int) -> int:
    """The last line of the error block that begins at `start` (its ERROR lines and traceback)."""
    end, in_tb = start, "Traceback (most recent call last)" in lines[start]
    for j in range(start + 1, min(len(lines), start + TRACEBACK_MAX)):
        body = _PREFIX.sub("", lines[j], count=1)
        if body.startswith(("Traceback", "During handling", "The above exception")):
            in_tb, end = True, j
        elif in_tb and _EXC_LINE.match(body):
            end = j  # the exception that ends the traceback; a chained one continues after a blank line
            following = [_PREFIX.sub("", x, count=1) for x in lines[j + 1:j + 3]]
            if not any(f.startswith(("During handling", "The above exception")) for f in following):
                return end
            in_tb = False
        elif in_tb and (body.startswith((" ", "\t")) or not body.strip()):
            end = j
        elif not in_tb and _ERROR_LINE.search(lines[j]):
            end = j
        elif j - end > 2:
            break
    return end


def _gap(n: int) -> str:
    return f"… {n} line{'s' if n != 1 else ''} left out …"


def log_excerpt(path: str | None) -> dict[str, Any]:
    """The lines that matter: the launch line, the figures lines, the first error and its traceback, the line
    that diagnosed the failure, and the last lines. Selected with backend.logparse, numbered, gaps marked."""

    if not path or not Path(path).is_file():
        return {"path": path, "lines_total": 0, "excerpt": [], "parsed": None,
                "note": "no server log" if not path else "the log file is gone"}
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = [ln.rstrip("\n") for ln in f]
    p = LogParser()
    figures: list[int] = []
    first_error = diagnosed = None
    for i, line in enumerate(lines):
        events = p.feed(line)
        if any(isinstance(e, Figure) for e in events):
            figures.append(i)
        if diagnosed is None and any(isinstance(e, Failure) for e in events):
            diagnosed = i
        if first_error is None and (_ERROR_LINE.search(line) or "Traceback (most recent call last)" in line):
            first_error = i
    if any(isinstance(e, Failure) for e in p.end_of_log()) and diagnosed is None:
        diagnosed = len(lines) - 1
    pick: set[int] = set()
    if lines and lines[0].startswith("qwen-tui: launch"):
        pick.add(0)
    if first_error is not None:
        start = max(0, first_error - 2)
        pick.update(range(start, _traceback_end(lines, first_error) + 1))
    if diagnosed is not None:
        pick.update(range(max(0, diagnosed - 3), min(len(lines), diagnosed + 3)))
    pick.update(range(max(0, len(lines) - 8), len(lines)))
    budget = EXCERPT_MAX - len(pick)
    pick.update(figures[:max(0, budget)])
    chosen = sorted(pick)[:EXCERPT_MAX]
    excerpt: list[tuple[int | None, str]] = []
    prev = -1
    for i in chosen:
        if i != prev + 1:
            excerpt.append((None, _gap(i - prev - 1 if prev >= 0 else i)))
        text = lines[i]
        excerpt.append((i + 1, text if len(text) <= LINE_MAX else text[:LINE_MAX] + " …"))
        prev = i
    if lines and prev < len(lines) - 1:
        excerpt.append((None, _gap(len(lines) - 1 - prev)))
    snap = p.snapshot()
    return {"path": path, "lines_total": len(lines), "excerpt": excerpt, "note": None,
            "parsed": {k: snap.get(k) for k in ("vllm_version", "phase", "weights_gib", "kv_cache_gib",
                                                "kv_cache_tokens", "max_concurrency", "failure")}}


def environment(settings: Settings) -> dict[str, Any]:
    inherited = {k: v for k, v in sorted(os.environ.items()) if k.startswith(ENV_PREFIXES)}
    return {"server_env": dict(settings.env), "inherited": inherited}


# -- all of it ----------------------------------------------------------------------------------------
def gather(settings: Settings, monitor: Any = None, status: dict[str, Any] | None = None) -> dict[str, Any]:
    """Every section as plain data (not redacted). Opens NVML itself when `monitor` is None (CUDA only)."""

    own = monitor is None and settings.planner_cfg.device != "cpu"
    if own:

        monitor = GpuMonitor(configured_gpus(settings.env))
    try:
        st = status if status is not None else supervisor_client.status()
        state_file = statefile.read() or {}
        return {
            "generated_at": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
            "versions": versions(settings, monitor),
            "gpus": gpus(monitor),
            "server": server(st),
            "command": command(settings, state_file),
            "settings": settings_view(settings),
            "plan": plan_text(settings, monitor),
            "doctor": doctor(settings, monitor),
            "log": log_excerpt(failing_log(st)),
            "environment": environment(settings),
            "stacks": stacks.latest(st.get("log_path")) if st.get("log_path") else None,
        }
    finally:
        if own and monitor is not None:
            monitor.shutdown()


def _table(rows: list[tuple[Any, ...]], head: tuple[str, ...]) -> list[str]:
    def cell(v: Any) -> str:
        return "" if v is None else str(v).replace("|", "\\|").replace("\n", " ")

    return (["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
            + ["| " + " | ".join(cell(v) for v in r) + " |" for r in rows])


def _toml_value(v: Any) -> str:
    return json.dumps(v) if not isinstance(v, bool) else str(v).lower()


def render(data: dict[str, Any], redaction: str | None) -> str:
    v, g, srv, cmd, log = data["versions"], data["gpus"], data["server"], data["command"], data["log"]
    out = ["# qwen-tui triage report", "",
           f"Generated {data['generated_at']} by `qwen-tui report`. "
           + (f"Redacted ({redaction}); `--no-redact` keeps everything." if redaction is not None
              else "**Not redacted** (`--no-redact`): check it before you paste it."), "",
           "## Versions", ""]
    out += _table([("qwen-tui", v["qwen_tui"]), ("vLLM", v["vllm"]), ("vLLM's Python", v["vllm_python"]),
                   ("torch", v["torch"]), ("CUDA (build)", v["cuda"]),
                   ("NVIDIA driver", f"{v['driver']} (CUDA {v['cuda_driver']})"), ("Python", v["python"]),
                   ("OS", v["os"])], ("what", "version"))
    out += ["", "## GPUs", ""]
    if g["available"]:
        out += _table([(x["index"], x["name"], x["memory_gib"], x["compute_capability"], x["pcie"],
                        x["nvlink_active_links"]) for x in g["gpus"]],
                      ("#", "name", "memory GiB", "compute capability", "PCIe", "NVLink links"))
        if g["p2p"]:
            out += ["", "P2P (NVML): " + "; ".join(f"{p['gpus']}: read {p['read']}, write {p['write']}, "
                                                    f"{p['topology']}" for p in g["p2p"])]
    else:
        out.append(f"No GPU data: {g['reason']}")
    out += ["", "## Server", "", f"State: **{srv['state']}**" + (f" ({srv['detail']})" if srv.get("detail") else "")
            + (f", attempt {srv['attempt']}" if srv.get("attempt") else "")
            + (f", {srv['restarts']} restart(s)" if srv.get("restarts") else "")]
    failure = srv.get("failure") or srv.get("last_failure")
    if failure:
        out += ["", "### Diagnosis", "", f"**{failure.get('kind')}**: {failure.get('message')}", "",
                f"Fix: {failure.get('fix')}"]
    if srv["attempts"]:
        out += ["", "### Attempts", ""]
        out += _table([(a["attempt"], a["kind"], a["exit_code"], "yes" if a["was_ready"] else "no", a["message"])
                       for a in srv["attempts"]], ("attempt", "kind", "exit code", "was ready", "message"))
    out += ["", "## Command line", "", "```sh", cmd["shell"], "```"]
    if cmd.get("last_launch"):
        out += ["", "The last launch ran (the settings have changed since):", "", "```sh", cmd["last_launch"], "```"]
    for p in cmd["problems"]:
        out.append(f"- refused before launch: {p}")
    s = data["settings"]
    out += ["", "## Settings", "", f"From {s['source'] or 'the defaults'}" + (" with --demo" if s["demo"] else "")
            + (f", overrides: {' '.join('--set ' + o for o in s['overrides'])}" if s["overrides"] else "")
            + " ([server]: every key passed; other sections: what differs from the defaults)", "", "```toml"]
    for section in SCHEMA:
        if s.get(section):
            out.append(f"[{section}]")
            out += [f"{k} = {_toml_value(val)}" for k, val in s[section].items()]
    out += ["```", "", "## Plan (`qwen-tui plan`)", "", "```", data["plan"].rstrip(), "```", "",
            "## Doctor (`qwen-tui doctor`)", ""]
    out += _table([(c["status"].upper(), c["name"], c["message"], c.get("fix")) for c in data["doctor"]],
                  ("", "check", "found", "fix"))
    out += ["", "## Log around the failure", ""]
    if log["excerpt"]:
        out += [f"`{Path(log['path']).name}`: {len(log['excerpt'])} of {log['lines_total']} lines (the launch, "
                "the first error and its traceback, the diagnosis, the figures, the last lines)", "", "```"]
        out += [f"{n:>5} {t}" if n is not None else f"      {t}" for n, t in log["excerpt"]]
        out.append("```")
    else:
        out.append(log.get("note") or "no log")
    if data.get("stacks"):  # `qwen-tui stacks` (or k in the console) during this launch
        d = data["stacks"]
        out += ["", "## Stacks of the server's processes", "",
                f"Dumped {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(d['at']))} by {d['tool']}:", "", "```"]
        out += stacks.format_text(d).splitlines()[1:] + ["```"]
    env = data["environment"]
    out += ["", "## Environment", "", "[server.env]:", "", "```"]
    out += [f"{k}={val}" for k, val in env["server_env"].items()] or ["(empty)"]
    out += ["```", "", "Inherited (" + ", ".join(p.rstrip("_") for p in ENV_PREFIXES) + "):", "", "```"]
    out += [f"{k}={val}" for k, val in env["inherited"].items()] or ["(none)"]
    out += ["```", ""]
    return "\n".join(out)


def build(settings: Settings, redact: bool = True, monitor: Any = None,
          status: dict[str, Any] | None = None) -> tuple[str, dict[str, Any], Redactor | None]:
    """(markdown, data, redactor): both redacted unless redact=False."""
    data = gather(settings, monitor, status)
    red = Redactor.for_settings(settings) if redact else None
    if red is not None:
        data = red.walk(data)
        text = red(render(data, ""))  # the rendering adds nothing secret; redact it again anyway
        text = text.replace("Redacted ()", f"Redacted ({red.summary()})", 1)
    else:
        text = render(data, None)
    return text, data, red


def run_report(settings: Settings, as_json: bool = False, out: str | None = None, redact: bool = True) -> int:
    text, data, red = build(settings, redact)
    body = (json.dumps({"markdown": text, "redacted": red is not None,
                        "redactions": dict(red.counts) if red else None, "report": data}, indent=2, default=str)
            if as_json else text)
    if out:
        try:
            Path(out).expanduser().write_text(body + "\n", encoding="utf-8")
        except OSError as e:
            print(f"qwen-tui report: cannot write {out}: {e.strerror}", file=sys.stderr)
            return 2
        print(f"report written to {out} ({len(text.splitlines())} lines, "
              + (f"redacted: {red.summary()})" if red else "NOT redacted)"), file=sys.stderr)
    else:
        sys.stdout.write(body + "\n")
    return 0
