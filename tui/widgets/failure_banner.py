"""FailureBanner: the diagnosed failure and its fix, shown only when there is one."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.text import Text
from textual.widgets import Static


class FailureBanner(Static):
    DEFAULT_CSS = """
    FailureBanner { display: none; background: $error 30%; border: heavy $error; padding: 0 1;
                    height: auto; }
    FailureBanner.-shown { display: block; }
    FailureBanner.-earlier { background: $warning 20%; border: heavy $warning; }
    """

    _shown: dict[str, Any] | None = None
    _earlier = False
    _fix: dict[str, Any] | None = None  # backend.fixes.Proposal.to_dict() of the shown failure

    def show(self, failure: Mapping[str, Any] | None, earlier: bool = False) -> None:
        """`earlier`: the failure of an earlier attempt, shown while the supervisor tries again."""
        if failure == self._shown and self.has_class("-shown") == bool(failure) \
                and self.has_class("-earlier") == earlier:
            return  # nothing changed: no redraw
        self._shown, self._earlier = (dict(failure) if failure else None), earlier
        self.set_class(bool(failure), "-shown")
        self.set_class(bool(failure) and earlier, "-earlier")
        if failure:
            self._render_text()

    def show_fix(self, fix: dict[str, Any] | None) -> None:
        """The failure's fix as a settings diff, the ledger's verdict and the key (or why not)."""
        if fix == self._fix:
            return
        self._fix = fix
        if self._shown:
            self._render_text()

    def _render_text(self) -> None:
        failure, earlier, fix = self._shown or {}, self._earlier, self._fix
        text = Text()
        kind = failure.get("kind")
        # no diagnosis ("unknown": a signal, an exit nobody explained) is a bare FAILED; the message says what
        named = f": {kind}" if kind not in (None, "", "unknown") else ""
        if earlier:
            text.append(f"attempt {failure.get('attempt')} FAILED{named} "
                        f"(restarting; `qwen-tui logs --attempt {failure.get('attempt')}`)\n", "bold")
        else:
            text.append(f"FAILED{named}\n", "bold")
        text.append(f"{failure.get('message', '')}\n")
        text.append("fix: ", "bold")
        text.append(str(failure.get("fix", "")))
        if fix:
            text.append("\n")
            text.append_text(fix_text(fix, "f: apply and restart"))
        self.update(text)


def fix_text(fix: dict[str, Any], key: str) -> Text:
    """A one-key fix (backend.fixes.Proposal.to_dict()): its key, the settings diff, the ledger's verdict
    and the file it is saved into; or why the key does not apply it. The banner's and the preflight's."""
    text = Text()
    text.append(f"{key}  " if fix.get("applicable") else "no one-key fix  ",
                "bold reverse" if fix.get("applicable") else "bold")
    text.append(" · ".join(fix.get("diff") or []))
    if fix.get("applicable"):
        verdict = (fix.get("verdict") or {}).get("text")
        text.append(f"  ({verdict}; saved into {fix.get('target')})" if verdict else
                    f"  (saved into {fix.get('target')})", "italic")
    else:
        text.append(f"  {fix.get('blocked')}", "italic")
    return text
