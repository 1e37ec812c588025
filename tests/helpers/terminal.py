"""A real console on a pseudo-terminal, as over SSH (the console tier's stand-in runs and the e2e tier)."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios
import threading

from tests.helpers import ROOT


def console_in_pty(argv: list[str], env: dict, size: tuple[int, int],
                   controlling: bool = False) -> subprocess.Popen:
    """`python -m tui.entry *argv` on a new pty of size (rows, columns), in its own session.

    The Popen gains `master` (the pty's master end, left open: a closed pty is itself a hang-up; the
    caller closes it) and `screen` (a bytearray of everything the console drew, filled by a thread).
    `controlling`: the pty becomes its controlling terminal, as in a real one (so closing the master
    sends it SIGHUP)."""
    rows, cols = size
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    preexec = (lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0)) if controlling else None
    proc = subprocess.Popen([sys.executable, "-m", "tui.entry", *argv], cwd=ROOT, stdin=slave, stdout=slave,
                            stderr=slave, env=env, start_new_session=True, preexec_fn=preexec)
    os.close(slave)
    proc.master = master
    proc.screen = bytearray()

    def drain() -> None:
        try:
            while True:
                chunk = os.read(master, 65536)
                if not chunk:
                    return
                proc.screen.extend(chunk)
        except OSError:
            pass

    threading.Thread(target=drain, daemon=True).start()
    return proc
