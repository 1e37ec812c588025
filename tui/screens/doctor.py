"""DoctorScreen: `qwen-tui doctor` in the console (key d): every pre-flight check, its figures and
its fix, worst first. `r` runs them again, `p` adds `doctor --p2p` (an all-reduce between the GPUs,
tens of seconds) as rows of its own, `esc` closes."""

from __future__ import annotations

import asyncio

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Label

from tui.messages import DoctorReady, P2PReady
from tui.palette import style
from tui.screens.dialog import Dialog

STYLE = {"ok": ("success", ""), "warn": ("warning", ""), "fail": ("error", "bold"), "skip": ("", "dim")}
RANK = {"fail": 0, "warn": 1, "ok": 2, "skip": 3}
P2P_STATUS = {"healthy": "ok", "skip": "skip", "hang": "fail", "wrong data": "fail", "error": "fail"}


def column_widths(screen_width: int, with_fix: bool = True) -> tuple[int, int, int, int]:
    """Status, check, found, fix: what fits in the dialog (95 % of the screen, its frame, a cell
    padding of 1 on each side and the scrollbar); found and fix wrap, so nothing is cut. With no
    fix to show, found takes the fix's width too (at 80 columns a path wrapped over three lines
    beside an empty fix column)."""
    avail = int(screen_width * 0.95) - 6 - 8 - 2
    rest = max(avail - 4 - 14, 30)
    if not with_fix:
        return 4, 14, rest + 2, 0  # + the fix column's padding
    found = rest * 11 // 20
    return 4, 14, found, rest - found


class DoctorScreen(Dialog[None]):
    CSS_PATH = "doctor.tcss"
    BINDINGS = [Binding("r", "rerun", "Run again", id="rerun"),
                Binding("g", "pull", "Get the model (pull)", id="pull"),
                Binding("p", "p2p", "All-reduce check (p2p)", id="p2p"),
                Binding("escape", "dismiss", "Close", id="close")]
    KEYS = "r: run again   p: all-reduce check   esc: close"

    def compose_body(self) -> ComposeResult:
        yield Label("running the checks…", id="summary")
        yield Label("", id="p2p")
        yield DataTable(id="checks", cursor_type="row", zebra_stripes=True)

    def on_mount(self) -> None:
        # key -> (status, check, found, fix): the table is drawn from these, so a fix that comes
        # later (the all-reduce check's) brings its column back
        self.rows: dict[str, tuple[Text, str, Text, Text]] = {}
        self._draw()
        self.run_doctor()

    def _draw(self) -> None:
        table = self.query_one(DataTable)
        with_fix = any(row[3].plain for row in self.rows.values())
        table.clear(columns=True)
        widths = column_widths(self.app.size.width, with_fix)
        for label, width in zip(("", "check", "found", "fix"), widths[:4 if with_fix else 3], strict=False):
            table.add_column(label, width=width)
        for key, row in self.rows.items():
            table.add_row(*(row if with_fix else row[:3]), key=key, height=None)

    @work(group="doctor", exclusive=True, exit_on_error=False)
    async def run_doctor(self) -> None:
        # start-up: loaded on first use, not before the console's first frame
        from backend.doctor import Env, run_checks

        try:
            checks = await asyncio.to_thread(run_checks, self.app.settings, Env(monitor=self.app.gpus))
            self.post_message(DoctorReady(checks))
        except Exception as e:  # run_checks never raises by contract; be sure anyway
            self.post_message(DoctorReady([], error=f"{type(e).__name__}: {e}"))

    @on(DoctorReady)
    def show(self, message: DoctorReady) -> None:
        self.rows.clear()
        self._draw()
        summary = self.query_one("#summary", Label)
        if message.error:
            summary.update(Text(f"the checks could not run: {message.error}", style(self.app, "error")))
            return
        counts = {s: sum(c.status == s for c in message.checks) for s in RANK}
        summary.update(Text(f"{counts['ok']} ok, {counts['warn']} warning(s), {counts['fail']} failed, "
                            f"{counts['skip']} skipped",
                            style(self.app, "error", "bold") if counts["fail"] else "bold"))
        offer = any(c.name == "model" and "qwen-tui pull" in (c.fix or "") for c in message.checks)
        self.query_one("#keys", Label).update("r: run again   " + ("g: get the model (pull)   " if offer else "")
                                              + "p: all-reduce check   esc: close")
        for c in sorted(message.checks, key=lambda c: RANK.get(c.status, 9)):
            self.rows[c.name] = (Text(c.status.upper(), style(self.app, *STYLE.get(c.status, ("", "")))), c.name,
                                 Text(c.message, overflow="fold"), Text(c.fix or "", "italic", overflow="fold"))
        self._draw()

    @work(group="p2p", exclusive=True, exit_on_error=False)
    async def run_p2p(self) -> None:
        # start-up: loaded on first use, not before the console's first frame
        from backend.doctor import Env
        from backend.doctor.p2p import run_p2p

        try:
            rep = await asyncio.to_thread(run_p2p, self.app.settings, Env(monitor=self.app.gpus))
            self.post_message(P2PReady(rep))
        except Exception as e:  # run_p2p reports its children's failures; anything else is shown
            self.post_message(P2PReady(None, error=f"{type(e).__name__}: {e}"))

    def action_p2p(self) -> None:
        self.query_one("#p2p", Label).update(Text("all-reduce check: running one process per rank…", "bold"))
        self.run_p2p()

    @on(P2PReady)
    def show_p2p(self, message: P2PReady) -> None:
        label = self.query_one("#p2p", Label)
        rep = message.report
        if rep is None:
            label.update(Text(f"the all-reduce check could not run: {message.error}", style(self.app, "error")))
            return
        label.update(Text(f"all-reduce check: {rep['message']}",
                          style(self.app, "error", "bold") if not rep["ok"] else "bold"))
        for m in rep["modes"]:
            key = f"p2p/{m['mode']}"
            self.rows.pop(key, None)  # a rerun's row goes to the end, as it is the newest
            status = P2P_STATUS.get(m["result"], "warn")
            fix = (rep.get("fix") or "") if m["mode"] == "as-configured" else ""
            self.rows[key] = (Text(m["result"].upper(), style(self.app, *STYLE.get(status, ("", "")))), key,
                              Text(f"{m['label']}: {m['detail']}", overflow="fold"),
                              Text(fix, "italic", overflow="fold"))
        self._draw()

    def action_pull(self) -> None:
        """The model check says the repo id is not downloaded: the pull screen, for that repo id."""
        # start-up: loaded on first use, not before the console's first frame
        from tui.screens.pull import PullScreen, looks_like_repo_id

        model = str(self.app.settings.server_cfg.model or "")
        main = self.app.main_screen
        self.app.push_screen(PullScreen(model if looks_like_repo_id(model) else None),
                             main._settings_closed if main is not None else None)

    def action_rerun(self) -> None:
        self.query_one("#summary", Label).update("running the checks…")
        self.query_one("#p2p", Label).update("")  # its rows go with the table's
        self.run_doctor()
