"""LedgerPanel: the memory ledger predicted before launch beside what vLLM printed, and the
batch-1 decode ceiling beside the measured tokens/s."""

from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.text import Text
from textual.widgets import Static

from tui.palette import style


def _fmt(v: Any) -> str:
    if v is None:
        return "—"
    if isinstance(v, float):  # a demo model's 0.0035 GiB of weights is not "0.00"
        return "<0.01" if 0 < abs(v) < 0.005 else f"{v:,.2f}"
    return f"{v:,}" if isinstance(v, int) else str(v)


# the ledger's row names, shortened so that a 40-column side panel (46 wide, less its border, padding
# and the side column's scrollbar) keeps every number whole and every label on one line: 13 characters
# ("weights/GPU" is in GiB, like "KV GiB/GPU")
SHORT = {"weights GiB per GPU": "weights/GPU", "KV cache GiB per GPU": "KV GiB/GPU",
         "KV cache tokens": "KV tokens", "max concurrency": "max conc.",
         "KV bytes per token per GPU": "KV B/tok/GPU"}


class LedgerPanel(Static):
    DEFAULT_CSS = """
    LedgerPanel { height: auto; }
    """

    last_cells: list[str] = []  # the plan and log figures shown, as text (tests: none is cut)

    def on_mount(self) -> None:
        self.border_title = "memory ledger: plan vs log"
        self.update(Text("computing the plan…", "dim"))

    def show(self, plan: dict[str, Any] | None, rows: list[dict[str, Any]], measured_tps: float | None,
             error: str | None = None) -> None:
        if plan is None:
            self.update(Text(error or "no plan", style(self.app, "warning")))
            return
        # numbers are never cut: their columns do not wrap (Rich only narrows wrapping columns),
        # the labels wrap instead
        table = Table.grid(padding=(0, 1))
        table.add_column(overflow="fold", ratio=1)
        for _ in range(3):
            table.add_column(no_wrap=True, justify="right")
        warn = style(self.app, "warning", "bold")
        table.add_row(Text("", "bold"), Text("plan", "bold"), Text("log", "bold"), Text("Δ", "bold"))
        for r in rows:
            diff = "" if r["diff_pct"] is None else f"{r['diff_pct']:+.1f}%"
            table.add_row(SHORT.get(r["name"], r["name"]), _fmt(r["predicted"]), _fmt(r["actual"]),
                          Text(diff + ("⚠" if r["off"] else ""), warn if r["off"] else "dim"))
        kv = plan.get("kv_bytes_per_token")  # all GPUs together; the row above is one GPU's share
        table.add_row("KV B/token", f"{kv:,}" if kv else "—", "", Text("total", "dim"))
        self.last_cells = [c for r in rows for c in (_fmt(r["predicted"]), _fmt(r["actual"]))]
        self.last_cells += [f"{kv:,}"] if kv else []
        ceiling = plan.get("decode_tokens_per_s_ceiling")
        table.add_row("decode tok/s", f"≤ {ceiling:.0f}" if ceiling else "—", _fmt(measured_tps), "batch 1")
        problems = plan.get("problems") or []
        out = Table.grid()
        out.add_row(table)
        basis = (plan.get("basis") or {}).get("summary")
        if basis:  # "measured on this box at 14:02 with vLLM 0.20.2, 3 launches" / "modelled"
            out.add_row(Text(f"basis: {basis}", "dim"))
        for p in problems:
            colour = style(self.app, "error" if p.get("severity") == "error" else "warning")
            out.add_row(Text(f"{p['kind']}: {p['message']}\n  fix: {p['fix']}", colour))
        self.update(out)
