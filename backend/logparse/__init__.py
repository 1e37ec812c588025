"""vLLM log parser and failure diagnosis.

    from backend.logparse import LogParser, parse_lines
    p = LogParser()
    for line in output:                     # live: one line at a time, t = your clock (optional)
        for event in p.feed(line, t=time.time()):
            ...                             # Milestone(phase, t) | Figure(name, value, rank) | Failure(kind, message, fix)
    p.process_exited(rc)                    # -> phase "stopped" or "failed" with a diagnosis
    p.snapshot()                            # the `qwen-tui parse-log --json` object

Plain Python (stdlib only); never imports the UI.
"""

from backend.logparse.events import (FAILURE_KINDS, PHASES, Event, Failure, Figure, Milestone)
from backend.logparse.parser import LogParser, parse_lines
from backend.logparse.summary import format_summary

__all__ = [
    "FAILURE_KINDS", "PHASES", "Event", "Failure", "Figure", "Milestone", "LogParser", "parse_lines",
    "format_summary",
]
