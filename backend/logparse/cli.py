"""`qwen-tui parse-log FILE|- [--json]`: read a whole vLLM log, print the final state.

Exit code 0 whatever the log says; 2 when the file cannot be read (one line on stderr).
"""

from __future__ import annotations

import json
import sys
from typing import IO, Iterator

from backend.logparse.parser import LogParser
from backend.logparse.summary import format_summary


def _binary_lines(stream: IO[bytes]) -> Iterator[str]:
    return (raw.rstrip(b"\n").decode("utf-8", errors="replace") for raw in stream)


def _skip_comment_header(lines: Iterator[str]) -> Iterator[str]:
    """Drop a leading block of `# ...` annotation lines (as in the test fixtures). vLLM never starts its
    output with one; a pasted `# GPU blocks: ...` line is kept."""
    for line in lines:
        if line.startswith("#") and " blocks: " not in line:
            continue
        yield line
        break
    yield from lines


def run_parse_log(path: str, as_json: bool, out: IO[str] = sys.stdout, err: IO[str] = sys.stderr) -> int:
    parser = LogParser()
    try:
        if path == "-":
            stdin = sys.stdin
            buf = getattr(stdin, "buffer", None)
            lines = _binary_lines(buf) if buf is not None else (ln.rstrip("\n") for ln in stdin)
            for line in _skip_comment_header(iter(lines)):
                parser.feed(line)
        else:
            with open(path, "rb") as fh:
                for line in _skip_comment_header(_binary_lines(fh)):
                    parser.feed(line)
    except OSError as e:
        reason = e.strerror or e.__class__.__name__
        err.write(f"qwen-tui parse-log: cannot read {path}: {reason}\n")
        return 2
    except (UnicodeError, ValueError) as e:  # e.g. a closed stdin
        err.write(f"qwen-tui parse-log: cannot read {path}: {e}\n")
        return 2
    parser.end_of_log()
    if as_json:
        out.write(json.dumps(parser.report(), indent=2) + "\n")
    else:
        out.write(format_summary(parser))
    return 0


def main(argv: list[str] | None = None) -> int:
    """Stand-alone entry (python -m backend.logparse.cli FILE [--json]); the main CLI calls run_parse_log."""
    args = list(sys.argv[1:] if argv is None else argv)
    as_json = "--json" in args
    rest = [a for a in args if a != "--json"]
    if len(rest) != 1:
        sys.stderr.write("usage: parse-log FILE|- [--json]\n")
        return 2
    return run_parse_log(rest[0], as_json)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
