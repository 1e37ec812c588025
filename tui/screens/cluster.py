"""ClusterScreen (key n on the main screen): every box of [cluster] and the router in front of them.

A row per box (its own state, /health, the router's view of it, running/waiting, KV tokens, max
concurrency, share of the requests since the last look) and the router's readiness. `d` drains the
highlighted box, `u` undrains it, `r` restarts every box one at a time; each asks first. The poll
runs in a thread and is re-armed only after it finishes (never two at once); actions run in their
own worker and post their progress as ClusterStep lines. `esc` goes back.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import DataTable, Label, Log

from backend.cluster import ops
from backend.cluster.config import Cluster
from tui.messages import ClusterPolled, ClusterStep
from tui.palette import style

BOX_EVERY = 6  # polls between two asks of each box's own status (30 s at the default 5 s)
COLUMNS = ("box", "state", "health", "router", "run", "wait", "KV tokens", "max conc", "share", "error")


def _n(x: float | None, spec: str = ".0f") -> str:
    return "-" if x is None else format(x, spec)


def router_text(view: ops.RouterView) -> str:
    if view.kind == "none":
        return "router: none (boxes only; drain and undrain need a router)"
    if not view.reachable:
        sup = view.supervisor.get("state") or "stopped"
        return f"router {view.url}: UNREACHABLE (supervisor {sup}; `qwen-tui router serve --detach`)"
    return (f"router {view.url}: {'ready' if view.ready else 'NOT READY'}, "
            f"{view.healthy_workers}/{view.total_workers} workers healthy")


def router_cell(b: ops.BoxRow) -> str:
    if b.in_router is None:
        return "-"
    if not b.in_router:
        return "drained" if b.drained else "not in router"
    if not b.router_healthy:
        return "UNHEALTHY"
    return "breaker open" if b.breaker_open else "healthy"


class ClusterScreen(Screen[None]):
    CSS_PATH = "cluster.tcss"
    BINDINGS = [
        Binding("d", "drain", "Drain box", id="cluster-drain"),
        Binding("u", "undrain", "Undrain box", id="cluster-undrain"),
        Binding("r", "rolling_restart", "Rolling restart", id="cluster-restart"),
        Binding("escape,n", "close", "Back", id="cluster-close"),
    ]

    def __init__(self, cluster: Cluster, poll_s: float | None = None) -> None:
        super().__init__()
        self.cluster = cluster
        self.poll_s = float(poll_s if poll_s is not None else min(5, cluster.health_interval_s))
        self.status: ops.ClusterStatus | None = None
        self.busy = False
        self._last_totals: dict[str, float] = {}
        self.polls = 0
        self._want_full = False

    def compose(self) -> ComposeResult:
        yield Label("router: asking…", id="router")
        yield DataTable(id="boxes", cursor_type="row", zebra_stripes=True)
        yield Log(id="steps", max_lines=500)
        yield Label("d: drain   u: undrain   r: rolling restart (each asks first)   esc: back", id="cluster-keys")

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        self._cols = table.add_columns(*COLUMNS)
        for b in self.cluster.boxes:
            table.add_row(b.name, "?", "?", "?", "", "", "", "", "", "", key=b.name)
        table.focus()
        self.poll()

    # -- the poll ------------------------------------------------------------------------------------
    def _full_poll_due(self) -> bool:
        """Each box's own `status --json` (a process, over ssh a connection) every BOX_EVERY polls,
        after an action and whenever a box's /health changed; /health, /metrics and the router on every poll."""
        st = self.status
        if st is None or self.polls % BOX_EVERY == 0 or self.busy or self._want_full:
            return True
        return any(b.healthy != (b.state == "ready") for b in st.boxes)

    @work(thread=True, group="cluster-poll", exclusive=True, exit_on_error=False)
    def poll(self) -> None:
        full = self._full_poll_due()
        self._want_full = False
        try:
            st = ops.status(self.cluster, None if full else self.status)
        except Exception as e:  # a poll never closes the console: it says why
            self.post_message(ClusterPolled(None, f"{type(e).__name__}: {e}"))
            return
        self.post_message(ClusterPolled(st))

    @on(ClusterPolled)
    def show(self, message: ClusterPolled) -> None:
        self.polls += 1
        if message.status is None:
            self.query_one("#router", Label).update(Text(f"cluster: {message.error}", style(self.app, "error")))
        else:
            st = message.status
            before = self._last_totals
            self._last_totals = {b.name: b.requests_total for b in st.boxes if b.requests_total is not None}
            if before:  # the share since the last look, not since each box started
                ops.shares(st.boxes, before)
                st.share_basis = "since the last look"
            self.status = st
            self._render_status(st)
        self.set_timer(self.poll_s, self.poll)

    def _render_status(self, st: ops.ClusterStatus) -> None:
        r = st.router
        good = r.kind == "none" or (r.reachable and r.ready and r.healthy_workers == r.total_workers)
        self.query_one("#router", Label).update(
            Text(router_text(r), style(self.app, "success" if good else ("warning" if r.ready else "error"), "bold")))
        table = self.query_one(DataTable)
        for b in st.boxes:
            health = Text("ok" if b.healthy else "DOWN", style(self.app, "success" if b.healthy else "error"))
            cells = (b.state or "?", health, router_cell(b), _n(b.running), _n(b.waiting),
                     _n(b.kv_tokens, ",d") if b.kv_tokens else "-", _n(b.max_concurrency, ".1f"),
                     "-" if b.share is None else f"{b.share * 100:.0f} %", (b.error or "")[:60])
            for col, value in zip(self._cols[1:], cells, strict=True):
                table.update_cell(b.name, col, value)

    def row(self, name: str) -> ops.BoxRow | None:
        return next((b for b in (self.status.boxes if self.status else []) if b.name == name), None)

    # -- actions -----------------------------------------------------------------------------------
    def _selected(self) -> str | None:
        table = self.query_one(DataTable)
        if not table.row_count:
            return None
        return str(table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value)

    def _ask(self, question: str, detail: str, run: Callable[[], object]) -> None:
        from tui.screens.confirm import ConfirmScreen  # only this path needs it (start-up, or a cycle)

        if self.busy:
            self.notify("busy: wait for the last cluster action to finish", severity="warning")
            return
        if self.cluster.router == "none" and run is not self._rolling:
            self.notify("cluster.router = \"none\": drain and undrain need a router", severity="warning")
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self.busy = True
                run()

        self.app.push_screen(ConfirmScreen(question, detail), answered)

    def action_drain(self) -> None:
        name = self._selected()
        if name:
            self._ask(f"Drain {name}?", "It leaves the router; its running requests finish "
                      f"(up to {self.cluster.drain_timeout_s:g} s). The other boxes take the traffic.",
                      lambda: self.act("drain", name))

    def action_undrain(self) -> None:
        name = self._selected()
        if name:
            self._ask(f"Undrain {name}?", "Once its /health answers 200 it goes back into the router.",
                      lambda: self.act("undrain", name))

    def _rolling(self) -> None:
        self.act("rolling", None)

    def action_rolling_restart(self) -> None:
        names = ", ".join(b.name for b in self.cluster.boxes)
        self._ask("Restart every box, one at a time?", f"{names}: each is drained, restarted, waited for until READY "
                  "and put back before the next one. It stops at a box that does not come back.", self._rolling)

    @work(thread=True, group="cluster-action", exclusive=True, exit_on_error=False)
    def act(self, what: str, name: str | None) -> None:
        def say(text: str) -> None:
            self.post_message(ClusterStep(text))

        try:
            if what == "rolling":
                out = ops.rolling_restart(self.cluster, say)
            elif name is None:  # drain and undrain are asked for with the highlighted box only
                raise ValueError("no box chosen")
            elif what == "drain":
                out = ops.drain(self.cluster, name, say)
            else:
                out = ops.undrain(self.cluster, name, say)
            ok = bool(out.get("ok")) and not out.get("timed_out")
            self.post_message(ClusterStep(f"{what} {name or 'every box'}: {'done' if ok else 'NOT done'}"
                                          + ("" if ok else f" ({_first_error(out)})"), done=True, error=not ok))
        except Exception as e:  # ClusterError says what to do; anything else is still said, not raised
            self.post_message(ClusterStep(f"{what} {name or ''}: {e}", done=True, error=True))

    @on(ClusterStep)
    def step(self, message: ClusterStep) -> None:
        self.query_one(Log).write_line(message.text)
        if message.done:
            self.busy = False
            self._want_full = True
            self.notify(message.text, severity="error" if message.error else "information")

    def action_close(self) -> None:
        self.workers.cancel_group(self, "cluster-poll")
        self.app.pop_screen()


def _first_error(out: dict[str, Any]) -> str:
    if out.get("error"):
        return str(out["error"])
    for b in out.get("boxes") or []:
        if not b.get("ok"):
            return str(b.get("error") or "failed")
    return "see the steps above"
