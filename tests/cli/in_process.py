"""`vtx` run inside the test's process, as a `subprocess.CompletedProcess`."""

import subprocess

from click.testing import CliRunner

from vtx_cli.main import main


def vtx_in_process(*args, stdin: bytes | None = None,
                   text: bool = False) -> subprocess.CompletedProcess:
    """`vtx ARGS` with `stdin` through Click's runner, without the seconds a process takes to
    start TensorFlow: for commands whose process sets nothing checked (signals, devices, XLA's
    flags and the profiler are per process). Standard output and error as bytes, or as str
    with `text`. An exception the command did not turn into its exit status is raised, as a
    process would have printed its traceback."""
    result = CliRunner().invoke(main, [str(a) for a in args], input=stdin)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    if text:
        return subprocess.CompletedProcess(args, result.exit_code, result.stdout, result.stderr)
    return subprocess.CompletedProcess(args, result.exit_code, result.stdout_bytes,
                                       result.stderr_bytes)
