"""PullScreen: `qwen-tui pull` in the console (key g; doctor offers it for a repo id not downloaded).

The pull runs as its own process (`qwen-tui pull ...`, backend/cli/pull_cmd.py) that writes its state file;
this screen starts it and follows that file, so a pull another console (or `pull --detach`) started
shows here the same way. Before the start: source, repo id, revision, target folder and its free space.
While it runs: a bar per file and one for all, bytes, rate, ETA; `c` cancels (the next pull continues),
`k` keeps it going when the console quits (otherwise quitting the console cancels it). At the end: the
verification, and `u` writes server.model = the folder into the config file (comments kept).
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import TYPE_CHECKING, Any

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Checkbox, Input, Label, ProgressBar, Select, Static

from tui.messages import PullPolled, PullStarted
from tui.palette import style
from tui.screens.dialog import Dialog

if TYPE_CHECKING:
    from pathlib import Path

    from backend.spawn import PullJob

POLL_S = 0.3


def looks_like_repo_id(model: str) -> bool:
    from backend.pull.run import check_repo_id  # start-up: loaded on first use, not before the console's first frame

    return bool(model) and not model.startswith(("/", ".", "~")) and check_repo_id(model) is None


class FileRow(Horizontal):
    """One file: its name, a bar, its bytes."""

    def __init__(self, path: str) -> None:
        super().__init__(classes="file-row")
        self.path = path

    def compose(self) -> ComposeResult:
        yield Label(self.path, classes="file-name")
        yield ProgressBar(total=100, show_eta=False, show_percentage=True, classes="file-bar")
        yield Label("", classes="file-bytes")

    def show(self, f: dict[str, Any]) -> None:
        # start-up: loaded on first use, not before the console's first frame
        from backend.pull.progress import human_bytes

        size = f.get("size") or 0
        self.query_one(ProgressBar).update(total=max(size, 1), progress=min(f.get("done") or 0, max(size, 1)))
        mark = {"present": " (already here)", "failed": " FAILED", "active": "", "done": "", "pending": ""}
        self.query_one(".file-bytes", Label).update(
            f"{human_bytes(f.get('done'))} / {human_bytes(size)}{mark.get(str(f.get('status')), '')}")


class PullScreen(Dialog[str | None]):
    """Dismisses with "saved" when server.model was set, else None."""

    CSS_PATH = "pull.tcss"
    BINDINGS = [Binding("c", "cancel_pull", "Cancel the pull", id="cancel"),
                Binding("k", "keep_going", "Keep going after quit", id="keep"),
                Binding("u", "use_folder", "Use this folder for server.model", id="use"),
                Binding("escape", "close", "Close (the pull goes on)", id="close")]
    KEYS = "enter: start   esc: close"

    def __init__(self, repo_id: str | None = None) -> None:
        super().__init__()
        self.repo_id = repo_id
        self.state: dict[str, Any] | None = None  # the pull's state file, last read
        self.alive = False
        self.rows: dict[str, FileRow] = {}
        self.following = False  # showing a pull (running now, or started here)
        self.started_pid: int | None = None

    def compose_body(self) -> ComposeResult:
        from backend.pull.run import SOURCES  # start-up: loaded on first use, not before the console's first frame

        model = str(self.app.settings.server_cfg.model or "")
        repo = self.repo_id or (model if looks_like_repo_id(model) else "")
        yield Label("Get a model: fill in, enter starts", id="summary")
        with VerticalScroll(id="form"):  # scrolls at 80×24, its keys line still on screen
            with Horizontal(classes="field"):
                yield Label("repo id", classes="field-label")
                yield Input(repo, placeholder="ORG/NAME, e.g. Qwen/Qwen2.5-14B-Instruct", id="repo")
            with Horizontal(classes="field"):
                yield Label("source", classes="field-label")
                yield Select([(s, s) for s in SOURCES], value="hf", allow_blank=False, id="source")
            with Horizontal(classes="field"):
                yield Label("revision", classes="field-label")
                yield Input("", placeholder="main (ModelScope: master)", id="revision")
            with Horizontal(classes="field"):
                yield Label("folder", classes="field-label")
                yield Input("", placeholder="default: the XDG data dir's models/<repo id>", id="folder")
            yield Checkbox("keep going when the console quits (a detached pull)", id="detach")
            yield Static("", id="target")
        with Vertical(id="overall"):
            yield ProgressBar(total=100, show_eta=False, id="overall-bar")
            yield Static("", id="overall-text")
        yield VerticalScroll(id="files")
        yield Static("", id="result")

    def on_mount(self) -> None:
        self.query_one("#overall").display = False
        self.query_one("#files").display = False  # the form has their rows until a pull starts
        self.show_target()
        self.poll_pull()
        # a field has focus from the start: enter submits, and typed letters are text, not c/k/u
        repo = self.query_one("#repo", Input)
        (self.query_one("#folder", Input) if repo.value else repo).focus()

    # -- before the start ------------------------------------------------------------------------
    def _form(self) -> tuple[str, str, str, str]:
        return (self.query_one("#repo", Input).value.strip(), str(self.query_one("#source", Select).value),
                self.query_one("#revision", Input).value.strip(), self.query_one("#folder", Input).value.strip())

    def _target(self, repo: str, folder: str) -> Path:
        from pathlib import Path  # start-up: loaded on first use, not before the console's first frame

        # start-up: loaded on first use, not before the console's first frame
        from backend.pull.run import default_local_dir

        return Path(folder).expanduser() if folder else default_local_dir(repo or "ORG/NAME")

    @on(Input.Changed)
    def show_target(self) -> None:
        # start-up: loaded on first use, not before the console's first frame
        from backend.pull.progress import human_bytes
        from backend.pull.run import free_bytes

        repo, _, _, folder = self._form()
        target = self._target(repo, folder)
        try:
            probe, free = free_bytes(target)
            room = f"{human_bytes(free)} free in {probe}"
        except OSError as e:
            room = f"free space unknown ({e.strerror})"
        self.query_one("#target", Static).update(f"into {target}: {room}")

    @on(Input.Submitted)
    def start(self) -> None:
        # start-up: loaded on first use, not before the console's first frame
        from backend.pull.run import check_repo_id

        if self.alive:
            self.notify("a pull is running: c cancels it", severity="warning")
            return
        repo, source, revision, folder = self._form()
        why = check_repo_id(repo) if repo else "a repo id first (ORG/NAME)"
        if why:
            self.notify(why, severity="error")
            return
        from backend.spawn import PullJob  # start-up: loaded on first use, not before the console's first frame

        detached = self.query_one("#detach", Checkbox).value
        job = PullJob(repo, source=source, revision=revision or None,
                      local_dir=str(self._target(repo, folder)) if folder else None,
                      watch_parent=None if detached else os.getpid())  # not detached: it stops with the console
        self.query_one("#summary", Label).update(f"starting the pull of {repo}…")
        self.start_worker(job)

    @work(group="pull-start", exclusive=True, exit_on_error=False)
    async def start_worker(self, job: PullJob) -> None:
        # start-up: loaded on first use, not before the console's first frame
        from backend import spawn
        from backend.pull.state import spawn as start

        try:
            pid, log = await asyncio.to_thread(start, spawn.pull(spawn.origin_of(self.app.settings), job))
            self.post_message(PullStarted(pid, str(log)))
        except OSError as e:
            self.post_message(PullStarted(None, None, error=f"cannot start the pull: {e.strerror or e}"))

    @on(PullStarted)
    def started(self, message: PullStarted) -> None:
        if message.error:
            self.notify(message.error, severity="error")
            return
        self.started_pid = message.pid
        self.notify(f"pull started (pid {message.pid}); its log: {message.log}", timeout=4)

    # -- following the state file ----------------------------------------------------------------
    @work(group="pull-poll", exclusive=True, exit_on_error=False)
    async def poll_pull(self) -> None:
        # start-up: loaded on first use, not before the console's first frame
        from backend.pull import state as pull_state

        def read() -> tuple[dict[str, Any] | None, bool, str | None]:
            data, why = pull_state.read()
            return data, pull_state.alive(data) if data else False, why

        while True:
            data, alive, why = await asyncio.to_thread(read)
            self.post_message(PullPolled(data, alive, why))
            await asyncio.sleep(POLL_S)

    @on(PullPolled)
    def show(self, message: PullPolled) -> None:
        # start-up: loaded on first use, not before the console's first frame
        from backend.pull.progress import human_bytes, human_seconds, overall_line
        from backend.pull.state import FINAL

        data = message.state
        if data is None:
            return
        running = message.alive and data.get("phase") not in FINAL
        if running or data.get("pid") == self.started_pid:
            self.following = True  # a pull that runs now, or the one this screen started
        if not self.following:
            return  # an earlier pull's record: the form stays
        self.state, self.alive = data, running
        if self.query_one("#form").display:
            self.query_one("#form").display = False
            self.query_one("#files").display = True
            self.set_focus(None)  # the form's inputs would take c/k/u as text
        self.query_one("#overall").display = True
        phase = data.get("phase")
        detached = (", keeps going after quit" if data.get("detached")
                    else ", stops if the console quits (k: keep going)")
        head = f"{data.get('repo_id')} ({data.get('source')}) into {data.get('local_dir') or '…'}: {phase}"
        if self.alive:
            head += f" (pid {data.get('pid')}{detached})"
        elif phase not in FINAL:
            head += " (its process is gone: pull again to continue)"
        self.query_one("#summary", Label).update(Text(head, "bold"))
        prog = data.get("progress")
        if prog:
            bar = self.query_one("#overall-bar", ProgressBar)
            bar.update(total=max(prog["total_bytes"], 1), progress=prog["done_bytes"])
            free = f"; {human_bytes(data.get('free_bytes'))} free" if data.get("free_bytes") is not None else ""
            self.query_one("#overall-text", Static).update(
                overall_line(prog) + f"; {human_bytes(prog['fetched_bytes'])} fetched, "
                f"{human_bytes(prog['resumed_bytes'])} already there, {human_seconds(prog['elapsed_s'])}{free}")
            box = self.query_one("#files", VerticalScroll)
            for f in prog["files"]:
                row = self.rows.get(f["path"])
                if row is None:
                    row = self.rows[f["path"]] = FileRow(f["path"])
                    box.mount(row)
                    row.call_after_refresh(row.show, f)
                else:
                    row.show(f)
        result = data.get("result")
        keys = "c: cancel   k: keep going after quit   esc: close" if self.alive else "esc: close"
        if result:
            self.query_one("#result", Static).update(self._result_text(result))
            if result.get("verified"):
                keys = "u: use this folder for server.model   esc: close"
            else:
                keys = "esc: close (pull again continues where it stopped)"
        self.query_one("#keys", Label).update(keys)

    def _result_text(self, r: dict[str, Any]) -> Text:
        from backend.pull.progress import (
            summary_text,  # start-up: loaded on first use, not before the console's first frame
        )

        text = Text()
        ok = bool(r.get("verified"))
        text.append(summary_text(r).split("\n")[0] + "\n",
                    style(self.app, "success" if ok else "error", "bold"))
        for line in summary_text(r).split("\n")[1:]:
            if "use it:" not in line:
                text.append(line + "\n")
        if ok:
            text.append(f"use this folder for server.model? u writes server.model = \"{r['local_dir']}\"\n", "italic")
        return text

    # -- keys ------------------------------------------------------------------------------------
    def action_cancel_pull(self) -> None:
        # start-up: loaded on first use, not before the console's first frame
        from backend.pull import state as pull_state

        if not (self.alive and self.state and pull_state.cancel(self.state)):
            self.notify("no pull is running", severity="warning")
            return
        self.notify("cancelling: the files fetched so far stay; pull again to continue", timeout=4)

    def action_keep_going(self) -> None:
        # start-up: loaded on first use, not before the console's first frame
        from backend.pull import state as pull_state

        if not (self.alive and self.state):
            self.notify("no pull is running", severity="warning")
        elif self.state.get("detached"):
            self.notify("it already keeps going after quit")
        elif pull_state.detach(self.state):
            self.notify("the pull keeps going when the console quits; a new console shows it (g)", timeout=4)

    def action_use_folder(self) -> None:
        # start-up: loaded on first use, not before the console's first frame
        from backend.errors import ConfigError
        from backend.setting_rows import apply_edit

        result = (self.state or {}).get("result") or {}
        if not result.get("verified"):
            self.notify("only a verified pull can become server.model", severity="warning")
            return
        try:
            saved = apply_edit(self.app.settings, "server", "model", json.dumps(result["local_dir"]))
        except ConfigError as e:
            self.notify(f"not saved: {e}", severity="error")
            return
        self.app.reload_settings(saved.settings)
        self.notify(saved.note, timeout=8)
        self.dismiss("saved")

    def action_close(self) -> None:
        self.dismiss(None)
