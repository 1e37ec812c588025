"""vLLM log parser and failure diagnosis.

    from backend.logparse import LogParser, parse_lines
    p = LogParser()
    for line in output:                     # live: one line at a time, t = your clock (optional)
        for event in p.feed(line, t=time.time()):
            ...                             # Milestone(phase, t) | Figure(name, value, rank)
                                            # | Failure(kind, message, fix)
    p.process_exited(rc)                    # -> phase "stopped" or "failed" with a diagnosis
    p.snapshot()                            # the state contract (status, console)
    p.end_of_log(); p.report()              # a whole file: the `qwen-tui parse-log --json` object
    is_permanent(kind, was_ready)           # would a restart with the same settings fail the same way?
    launch_marker(t, pid, argv)             # the first line the supervisor writes into each server log

Plain Python (stdlib only); never imports the UI.
"""

from backend.logparse.events import (
                                     FAILURE_KINDS,
                                     PERMANENT_AT_STARTUP,
                                     PERMANENT_KINDS,
                                     PHASES,
                                     RESTART,
                                     Event,
                                     Failure,
                                     Figure,
                                     Milestone,
                                     is_permanent,
)
from backend.logparse.marker import launch_marker, parse_marker
from backend.logparse.parser import LogParser, parse_lines
from backend.logparse.summary import format_summary

__all__ = [
    "FAILURE_KINDS", "PERMANENT_AT_STARTUP", "PERMANENT_KINDS", "PHASES", "RESTART", "Event", "Failure", "Figure",
    "Milestone", "LogParser", "is_permanent", "launch_marker", "parse_lines", "parse_marker", "format_summary",
]
