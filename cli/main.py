"""`vtx` command group.

Subcommand modules import only click at module level; TensorFlow is imported inside each command,
so `vtx --help` answers instantly.
"""

import errno
import os
import signal
import sys
import threading

# The console script imports this module first: a Ctrl-C while click and vtx load, before the
# group below handles it, ends with one line and 130 as well, not a KeyboardInterrupt traceback.
try:
    import click

    from vtx import stop
    from vtx_cli import (average_checkpoints, export, import_model, parse, prepare_parse,
                         preprocess, score, score_trees, serve, train, translate)
except KeyboardInterrupt:
    print("vtx: interrupted (SIGINT) while starting", file=sys.stderr)
    sys.exit(128 + signal.SIGINT)


class Vtx(click.Group):
    """The group: an OSError a command lets through (a full disk under what it prints, a
    folder gone) ends with its one-line message, not a traceback. A reader gone from the pipe
    (`vtx translate ... | head -1`) is click's quiet exit 1, also where a command had made it
    an error message. Ctrl-C (KeyboardInterrupt) exits 130 with one line naming the command,
    where click said "Aborted!" and exited 1."""

    def invoke(self, ctx: click.Context):
        # SIGTERM (a scheduler, `kill`) ends the command as an exception, like Ctrl-C: the
        # cleanups run, so an output's hidden temporary is removed (Python's default ended the
        # process on the spot and left it, full size, for good). `vtx train` sets its own.
        main_thread = threading.current_thread() is threading.main_thread()
        previous = {signum: signal.signal(signum, _stop) for signum in
                    (signal.SIGTERM, signal.SIGINT)} if main_thread else {}
        if main_thread:
            stop.watch(_stop)  # a long TensorFlow call is waited for where a signal can end it
        try:
            result = self._invoke(ctx)
        except KeyboardInterrupt:
            # Raised through the command, so its cleanups (an output's hidden temporary) have
            # run. SystemExit passes click's standalone main, which would make this an Abort.
            _interrupted(ctx, signal.SIGINT)
        except SystemExit as end:
            _exit(end.code)
        except Exception:
            # A signal's exception raised where a library catches everything and fails another
            # way: Keras's `ops.shape` has a bare `except:`, so a SIGTERM landing there while
            # `vtx translate` traced its search ended as "Error: ... None values not supported",
            # exit 1. The cleanups ran as the error went up; the exit is the signal's.
            if (signum := stop.noted()) is not None:
                _interrupted(ctx, signum)
            raise
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            if main_thread:
                stop.watch(None)
            noted = stop.claim()  # not left to a later command in this process
        # Swallowed where no output was on its way (`vtx.stop`): the exit is still the signal's.
        if noted is not None:
            _interrupted(ctx, noted)
        return result

    def _invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except click.ClickException as error:
            if _closed_pipe(error.__cause__):
                raise error.__cause__ from None
            raise
        except OSError as error:
            if _closed_pipe(error):
                raise
            raise click.ClickException(str(error)) from error


def _stop(signum: int, frame) -> None:
    """Noted, then raised: KeyboardInterrupt for SIGINT (Python's own), SystemExit(128 + signum)
    for SIGTERM; raised again wherever an output is on its way should a library swallow it."""
    stop.note(signum)
    stop.check()


def _interrupted(ctx: click.Context, signum: int) -> None:
    """Exit as `signum` ended the command: SIGINT says so in one line (click said "Aborted!")."""
    if signum == signal.SIGINT:
        command = f"vtx {ctx.invoked_subcommand}" if ctx.invoked_subcommand else "vtx"
        click.echo(f"{command}: interrupted (SIGINT)", err=True)
    _exit(128 + signum)


def _exit(code) -> None:
    """sys.exit(code); at once where a search the signal cut short still runs on its thread
    (`stop.interruptible`): the cleanups have run, and the interpreter's exit would wait on it."""
    if stop.abandoned():
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code if isinstance(code, int) else 1)
    sys.exit(code)


def _closed_pipe(error: BaseException | None) -> bool:
    return isinstance(error, OSError) and error.errno == errno.EPIPE


@click.group(cls=Vtx, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="vtx")
def main() -> None:
    """vtx: Transformer sequence-to-sequence models (Vaswani et al., 2017) on Keras 3."""


main.add_command(preprocess.preprocess)
main.add_command(train.train)
main.add_command(average_checkpoints.average_checkpoints)
main.add_command(translate.translate)
main.add_command(parse.parse)
main.add_command(export.export)
main.add_command(import_model.import_model)
main.add_command(score.score)
main.add_command(score_trees.score_trees)
main.add_command(prepare_parse.prepare_parse)
main.add_command(serve.serve)

if __name__ == "__main__":
    main()
