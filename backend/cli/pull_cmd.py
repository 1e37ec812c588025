"""`qwen-tui pull [--source hf|modelscope] [--revision R] [--local-dir DIR] [--set-model] [--json] REPO_ID`.

Progress goes to stderr (a line per file started and finished, the overall bytes, rate and ETA);
stdout gets the result (one JSON object with --json). Exit 0 only when the folder is verified;
1 when it is not (or the download failed), 2 for bad input, 130 when cancelled (SIGINT/SIGTERM).
`--detach` runs the same pull in the background (its output in the state dir's logs/);
`--status` shows the running or last pull, `--cancel` stops a running one (the .part files stay).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from backend.pull import state as pull_state
from backend.pull.progress import human_bytes, overall_line, summary_text
from backend.pull.run import SOURCES, Pull, PullOptions, check_repo_id
from backend.pull.state import spawn

if TYPE_CHECKING:
    from backend.settings import Settings


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("repo_id", metavar="REPO_ID", nargs="?", help="e.g. Qwen/Qwen2.5-14B-Instruct")
    p.add_argument("--source", choices=SOURCES, default="hf",
                   help="hf: the Hugging Face hub or $HF_ENDPOINT (default); modelscope: ModelScope "
                        "(pip install 'qwen-tui[modelscope]')")
    p.add_argument("--revision", metavar="R", help="branch, tag or commit (default: main; master on ModelScope)")
    p.add_argument("--local-dir", metavar="DIR", help="target folder (default: <XDG data dir>/models/REPO_ID)")
    p.add_argument("--endpoint", metavar="URL", help="the hub's address (default: $HF_ENDPOINT, else the hub; "
                   "for ModelScope $MODELSCOPE_ENDPOINT)")
    p.add_argument("--set-model", action="store_true",
                   help='when verified, write server.model = "<local dir>" into the config file (comments kept)')
    p.add_argument("--workers", type=int, default=4, metavar="N", help="files fetched at once (default 4)")
    p.add_argument("--detach", action="store_true", help="run in the background (follow: pull --status)")
    p.add_argument("--status", action="store_true", help="show the running (or last) pull")
    p.add_argument("--cancel", action="store_true", help="cancel the running pull (a later pull continues)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--watch-parent", type=int, metavar="PID", help=argparse.SUPPRESS)


def _err(msg: str) -> None:
    print(f"qwen-tui: {msg}", file=sys.stderr)


class Printer:
    """Progress for people on stderr: the file lines as they happen, the overall line each second
    (every 5 s when stderr is not a terminal)."""

    def __init__(self, out: TextIO, every_s: float | None = None) -> None:
        self.out = out
        self.tty = out.isatty()
        self.every_s = every_s if every_s is not None else (1.0 if self.tty else 5.0)  # a log: a line per 5 s
        self._last = 0.0
        self._status: dict[str, str] = {}
        self._lock = threading.Lock()

    def __call__(self, phase: str, data: dict[str, Any]) -> None:
        with self._lock:
            self._event(phase, data)

    def _line(self, text: str) -> None:
        self.out.write(("\r\x1b[K" if self.tty else "") + text + "\n")
        self.out.flush()

    def _event(self, phase: str, data: dict[str, Any]) -> None:
        if phase == "listing":
            self._line(f"pull: listing the files on {data.get('endpoint')}")
        elif phase == "preflight":
            lst = data["listing"]
            skipped = f"; not fetched: {len(lst['skipped'])} file(s) vLLM does not load" if lst["skipped"] else ""
            self._line(f"pull: {lst['repo_id']} at {lst['revision']} ({(lst['commit'] or '?')[:12]}): "
                       f"{len(lst['files'])} files, {human_bytes(lst['total_bytes'])}; "
                       f"{human_bytes(data['present_bytes'])} already in {data['local_dir']}; needs "
                       f"{human_bytes(data['needed_bytes'])}, {human_bytes(data['free_bytes'])} free in "
                       f"{data['free_probe']}{skipped}")
        elif phase == "downloading":
            for f in data["files"]:
                was, now = self._status.get(f["path"]), f["status"]
                if now != was:
                    self._status[f["path"]] = now
                    if now == "active":
                        resumed = f", resuming at {human_bytes(f['resumed_from'])}" if f["resumed_from"] else ""
                        self._line(f"  get  {f['path']} ({human_bytes(f['size'])}{resumed})")
                    elif now == "done":
                        self._line(f"  done {f['path']} ({human_bytes(f['size'])})")
                    elif now == "present":
                        self._line(f"  have {f['path']} ({human_bytes(f['size'])}, already complete)")
                    elif now == "failed":
                        self._line(f"  FAIL {f['path']}")
            now_t = time.monotonic()
            if now_t - self._last >= self.every_s:
                self._last = now_t
                active = [f for f in data["files"] if f["status"] == "active"]
                tail = "".join(f"; {f['path']} {human_bytes(f['done'])}/{human_bytes(f['size'])}" for f in active[:2])
                text = overall_line(data) + tail
                if self.tty:
                    self.out.write("\r\x1b[K" + text[:200])
                    self.out.flush()
                else:
                    self._line(text)
        elif phase == "verifying":
            self._line("pull: verifying (sizes, index, safetensors headers, config, tokenizer)")


def _watch(cancel: threading.Event, parent: int, detached: threading.Event) -> None:
    """Cancel when the console that started this pull is gone, unless it asked us to keep going."""
    from backend.server import statefile  # only when a pull runs: the hub clients are slow to import

    born = statefile.create_time(parent)
    while not cancel.is_set():
        if not detached.is_set() and (born is None or statefile.create_time(parent) != born):
            cancel.set()
            return
        time.sleep(0.5)


def _status(args: argparse.Namespace) -> int:
    data, why = pull_state.read()
    if why:
        _err(why)
    live = data is not None and bool(data) and pull_state.alive(data)
    if args.json:
        running = live and data is not None and data.get("phase") not in pull_state.FINAL
        print(json.dumps({"running": running, "state": data},
                         indent=2, default=str))
        return 0 if data else 1
    if not data:
        print("no pull has run (or its state file is gone)")
        return 1
    prog = data.get("progress")
    where = f" into {data.get('local_dir')}" if data.get("local_dir") else ""
    head = f"{data['repo_id']} ({data['source']}){where}: {data['phase']}"
    if live and data["phase"] not in pull_state.FINAL:
        head += f", pid {data['pid']}" + (", detached" if data.get("detached") else "")
    elif data["phase"] not in pull_state.FINAL:
        head += " (its process is gone: pull again to continue)"
    print(head)
    if prog:
        print("  " + overall_line(prog))
    if data.get("result"):
        print(summary_text(data["result"]))
    return 0


def _cancel() -> int:
    data = pull_state.running()
    if not data:
        print("no pull is running")
        return 1
    pull_state.cancel(data)
    deadline = time.time() + 15
    while time.time() < deadline and pull_state.alive(data):
        time.sleep(0.1)
    print(f"cancelled the pull of {data['repo_id']} (pid {data['pid']}); pull it again to continue")
    return 0


def cmd_pull(args: argparse.Namespace) -> int:
    if args.status:
        return _status(args)
    if args.cancel:
        return _cancel()
    if not args.repo_id:
        _err("pull needs REPO_ID (e.g. Qwen/Qwen2.5-14B-Instruct), or --status / --cancel")
        return 2
    why = check_repo_id(args.repo_id)
    if why:
        _err(why)
        return 2
    if args.workers < 1:
        _err("--workers must be 1 or more")
        return 2
    settings: Settings | None = None
    if args.set_model:
        from backend.cli.options import load_settings  # only when a pull runs: the hub clients are slow to import

        settings = load_settings(args)  # a bad config is exit 2 now, not after the download
    other = pull_state.running()
    if other and other.get("pid") != os.getpid():
        _err(f"a pull is running: {other['repo_id']} (pid {other['pid']}) into {other.get('local_dir') or '?'}; "
             "follow it with `qwen-tui pull --status`, stop it with `qwen-tui pull --cancel`")
        return 1
    if args.detach:
        pid, log = spawn(_rebuild(args))
        if args.json:
            print(json.dumps({"pid": pid, "log_path": str(log), "state_path": str(pull_state.state_path())}))
        else:
            print(f"pulling {args.repo_id} in the background (pid {pid}); log {log}\n"
                  "follow: qwen-tui pull --status   cancel: qwen-tui pull --cancel")
        return 0
    return _run(args, settings)


def _rebuild(args: argparse.Namespace) -> list[str]:
    """This pull, without --detach, as the command line of its own process."""
    from backend import spawn as child  # only when a pull detaches

    return child.pull(child.origin_of_options(args), child.PullJob(
        args.repo_id, source=args.source, workers=args.workers, revision=args.revision,
        local_dir=str(args.local_dir) if args.local_dir else None, set_model=args.set_model, json=args.json,
        endpoint=args.endpoint))


def _run(args: argparse.Namespace, settings: Settings | None) -> int:
    cancel, detached = threading.Event(), threading.Event()
    if not args.watch_parent:
        detached.set()
    writer = pull_state.StateWriter(args.repo_id, args.source, detached.is_set(),
                                    os.environ.get("QWEN_TUI_PULL_LOG"))
    printer = Printer(sys.stderr)

    def on_event(phase: str, data: dict[str, Any]) -> None:
        writer.event(phase, data)
        printer(phase, data)

    def on_detach(*_: Any) -> None:
        detached.set()
        writer.set_detached(True)

    old: dict[signal.Signals, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            old[sig] = signal.signal(sig, lambda *_: cancel.set())
        old[signal.SIGUSR1] = signal.signal(signal.SIGUSR1, on_detach)
    if args.watch_parent:
        threading.Thread(target=_watch, args=(cancel, args.watch_parent, detached), daemon=True).start()
    try:
        options = PullOptions(args.repo_id, args.source, args.revision,
                              Path(args.local_dir).expanduser() if args.local_dir else None, args.endpoint,
                              args.workers)
        pull = Pull(options, on_event=on_event, cancel=cancel)
        result = pull.run()
        if result["verified"] and args.set_model and settings is not None:
            result = _set_model(result, settings)
            writer.event("done", {"result": result})
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
    if printer.tty:
        sys.stderr.write("\n")
    print(json.dumps(result, indent=2, default=str) if args.json else summary_text(result))
    if result.get("cancelled"):
        return 130
    if result.get("error_kind") == "bad-input":
        return 2
    return 0 if result["verified"] and not result.get("model_set_error") else 1


def _set_model(result: dict[str, Any], settings: Settings) -> dict[str, Any]:
    # only when a pull runs: the hub clients are slow to import
    from backend.errors import ConfigError
    from backend.setting_rows import config_target
    from backend.settings import save_setting

    path = config_target(settings)
    try:
        save_setting(path, "server", "model", result["local_dir"])
    except ConfigError as e:
        return dict(result, model_set_error=str(e))
    return dict(result, model_set=str(path))
