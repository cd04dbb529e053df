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

A Python signal handler runs only when the main thread runs Python, so it waits for a TensorFlow
call to return: a wide beam's search of one batch can take minutes. Under the command line's
handler, `interruptible` makes such a call on a worker thread while the main thread waits for it
in slices of `WAIT_SLICE` seconds: the signal's exception ends the wait, the command's cleanups
run, and the command line ends the process (`abandoned` tells it a call is still running; the
interpreter's exit would wait for it or tear TensorFlow down under it).
"""

from __future__ import annotations

import signal
import threading
from typing import Any, Callable, TypeVar

_noted: int | None = None
_watcher: Callable | None = None  # the command line's handler, while installed
_running: set[threading.Event] = set()  # set when its call has returned
WAIT_SLICE = 0.05  # seconds between two chances for a signal handler to run

T = TypeVar("T")


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


def watch(handler: Callable | None) -> None:
    """The command line installed `handler` for SIGTERM and SIGINT (None: removed it)."""
    global _watcher
    _watcher = handler


def interruptible(call: Callable[..., T], *args: Any) -> T:
    """`call(*args)`, ended early by a signal under the command line's handler.

    There (on the main thread, the handler still the one `watch` named) the call runs on a worker
    thread and the main thread waits for it; a signal's exception raised in the wait goes up at
    once and the call is left running (`abandoned`). Anywhere else (a library user's process,
    `vtx train` with its own handler, another thread) it is a plain call: a worker thread would not
    see the caller's thread-local TensorFlow and Keras scopes.

    Returns:
        What `call` returned; what it raised is raised here.
    """
    if (_watcher is None or threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGTERM) is not _watcher):
        return call(*args)
    outcome: dict[str, Any] = {}
    returned = threading.Event()

    def run() -> None:
        try:
            outcome["value"] = call(*args)
        except BaseException as error:  # noqa: B036 - handed to the waiting thread as is
            outcome["error"] = error
        finally:
            returned.set()

    _running.add(returned)
    threading.Thread(target=run, name="vtx-interruptible", daemon=True).start()
    # An Event, not Thread.join: a signal's exception inside join's wait marks a running thread
    # as ended (CPython's bpo-45274 fix releases the lock the thread still holds).
    while not returned.wait(WAIT_SLICE):
        pass
    _running.discard(returned)
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def abandoned() -> bool:
    """Whether a call `interruptible` left when a signal ended its wait is still running."""
    return any(not returned.is_set() for returned in _running)
