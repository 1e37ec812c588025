"""The main screen's one-key fix (f): the shown failure's fix as data (backend/fixes.py) with the
ledger's verdict in the failure banner; f saves it into the config file in use and restarts. And k:
the stacks of the server's processes (backend/stacks.py), which the status line offers when the hang
watchdog says a start phase runs far past its usual length.

A mixin of MainScreen (kept apart so each module stays small). The proposal is computed in a thread
once per failure (the ledger reads the model's config); handlers by name, as a mixin's must be.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from textual import work

from tui.messages import FixApplied, FixProposed, StacksDumped

if TYPE_CHECKING:
    from backend.fixes import Proposal
    from tui.screens.server_actions import MainScreenParts
else:
    MainScreenParts = object


class FixActions(MainScreenParts):
    """Expects: self.app (QwenApp), self.compute_plan, self.restart_after_plan (MainScreenParts)."""

    fix_key: tuple[Any, ...] | None = None
    fix: Proposal | None = None  # the one shown

    def _show_fix(self, fix: dict[str, Any] | None) -> None:
        if (banner := self.failure_banner()) is not None:  # none before the first failure
            banner.show_fix(fix)

    def offer_fix(self, failure: Mapping[str, Any] | None) -> None:
        """Called with the failure the banner shows: a new one gets its proposal computed."""
        key = (failure.get("kind"), failure.get("message"), failure.get("attempt")) if failure else None
        if key == self.fix_key:
            return
        self.fix_key, self.fix = key, None
        self._show_fix(None)
        if failure and key is not None:
            self.propose_worker(key, dict(failure))

    @work(group="fix", exclusive=True, exit_on_error=False)
    async def propose_worker(self, key: tuple[Any, ...], failure: dict[str, Any]) -> None:
        from backend import fixes  # start-up: loaded on first use, not before the console's first frame

        prop = await asyncio.to_thread(fixes.propose, failure, self.app.settings)
        self.post_message(FixProposed(key, prop))

    def on_fix_proposed(self, message: FixProposed) -> None:
        if message.key != self.fix_key:
            return  # an older failure's
        self.fix = message.proposal
        self._show_fix(message.proposal.to_dict() if message.proposal else None)

    def action_apply_fix(self) -> None:
        prop = self.fix
        if prop is None:
            self.notify("no one-key fix: nothing failed, or the fix is no settings change (read the banner)",
                        severity="warning")
            return
        if not prop.applicable:
            self.notify(f"not applied: {prop.blocked}", severity="warning", timeout=10)
            return
        self.apply_worker(prop)

    @work(group="fix-apply", exclusive=True, exit_on_error=False)
    async def apply_worker(self, prop: Proposal) -> None:
        from backend import fixes  # start-up: loaded on first use, not before the console's first frame
        from backend.errors import ConfigError

        try:
            path, new = await asyncio.to_thread(fixes.apply, prop, self.app.settings)
            self.post_message(FixApplied(prop, str(path), new))
        except (ConfigError, ValueError, OSError) as e:
            self.post_message(FixApplied(prop, None, None, error=str(e)))

    def on_fix_applied(self, message: FixApplied) -> None:
        if message.error:
            self.notify(f"fix not saved: {message.error}", severity="error", timeout=10)
            return
        self.app.reload_settings(message.settings)
        diff = "; ".join(c.diff() for c in message.proposal.changes)
        self.notify(f"saved {diff} to {message.path}; restarting", timeout=8)
        from backend.cli.fix_cmd import record  # start-up: loaded on first use

        record(message.proposal, message.path)
        self.fix = None
        self._show_fix(None)
        self.restart_after_plan = True  # the restart runs on the fixed settings' plan (MainScreen.plan_ready)
        self.compute_plan()

    # -- k: the stacks of a start that hangs ------------------------------------------------------------
    def action_dump_stacks(self) -> None:
        self.notify("dumping the stacks of the server's processes…", timeout=3)
        self.stacks_worker()

    @work(group="stacks", exclusive=True, exit_on_error=False)
    async def stacks_worker(self) -> None:
        from backend import stacks  # start-up: loaded on first use
        from backend.server import statefile  # start-up: loaded on first use

        def run() -> StacksDumped:
            state = statefile.read() or {}
            pids = stacks.server_pids(state)
            if not pids:
                return StacksDumped(None, error="no server process to dump")
            d = stacks.dump(pids, log_path=state.get("log_path"))
            return StacksDumped(str(stacks.save(d)), len(pids))

        try:
            self.post_message(await asyncio.to_thread(run))
        except Exception as e:  # a dump is a diagnostic: say why it failed, never take the console down
            self.post_message(StacksDumped(None, error=f"{type(e).__name__}: {e}"))

    def on_stacks_dumped(self, message: StacksDumped) -> None:
        if message.error:
            self.notify(f"stacks: {message.error}", severity="warning")
        else:
            self.notify(f"stacks of {message.count} process(es) saved to {message.path} "
                        "(t: the report includes them)", timeout=10)
