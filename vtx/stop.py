"""A stop that a signal asked for, held until the command ends.

The command line's SIGTERM and SIGINT handlers note the signal here and raise its exception where
the main thread is. A library that catches everything where it lands swallows that exception
(Keras's `ops.shape` has a bare `except:` around a TensorFlow call), and the command went on: on
CI, a `vtx translate` SIGTERM'd while it traced its search translated all of its input instead of
ending. So the places every command's output passes, a line written and an output about to be put
in place (`vtx.atomic`), call `check()`, which raises the signal's exception again: a signal
never lets an output be completed, whatever swallowed its first exception.

Nothing is noted outside the command line (a library user's own handlers are left alone). `vtx
train` sets its own while it trains (a stop ends the run at an update, with a checkpoint), and
takes over one noted before (`claim`): a SIGTERM swallowed during its start stops it there too.
"""

from __future__ import annotations

import signal

_noted: int | None = None


def note(signum: int) -> None:
    """`signum` asked the running command to stop."""
    global _noted
    _noted = signum


def noted() -> int | None:
    """The last signal noted since `claim`, or None."""
    return _noted


def claim() -> int | None:
    """The noted signal (or None), now the caller's to honour: cleared, so that `check` lets the
    caller's own ending (a checkpoint) be written."""
    global _noted
    signum, _noted = _noted, None
    return signum


def check() -> None:
    """Raise the exception of a noted signal: KeyboardInterrupt for SIGINT (as Python's own
    handler), SystemExit(128 + signum) for the others; nothing when none was noted."""
    if _noted is None:
        return
    if _noted == signal.SIGINT:
        raise KeyboardInterrupt
    raise SystemExit(128 + _noted)
