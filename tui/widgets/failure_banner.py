"""FailureBanner: the diagnosed failure and its fix, shown only when there is one."""

from __future__ import annotations

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

    def show(self, failure: dict[str, Any] | None, earlier: bool = False) -> None:
        """`earlier`: the failure of an earlier attempt, shown while the supervisor tries again."""
        if failure == self._shown and self.has_class("-shown") == bool(failure) \
                and self.has_class("-earlier") == earlier:
            return  # nothing changed: no redraw
        self._shown = dict(failure) if failure else None
        self.set_class(bool(failure), "-shown")
        self.set_class(bool(failure) and earlier, "-earlier")
        if not failure:
            return
        text = Text()
        if earlier:
            text.append(f"attempt {failure.get('attempt')} FAILED: {failure.get('kind')} "
                        f"(restarting; `qwen-tui logs --attempt {failure.get('attempt')}`)\n", "bold")
        else:
            text.append(f"FAILED: {failure.get('kind')}\n", "bold")
        text.append(f"{failure.get('message', '')}\n")
        text.append("fix: ", "bold")
        text.append(str(failure.get("fix", "")))
        self.update(text)
