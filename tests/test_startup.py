"""TensorFlow's start-up lines held back (`vtx.startup`): a command's standard error holds vtx's
own lines only, unless VTX_TF_LOG asks for TensorFlow's; its real errors still come through."""

import os
import subprocess
import sys

from tests.cli.stderr import TENSORFLOW_LINE
from tests.conftest import TRANSLATION_MODEL
from vtx import startup


def run(*args, env=None, stdin=""):
    return subprocess.run(args, capture_output=True, text=True, input=stdin, timeout=600,
                          env={**os.environ, **(env or {})})


def test_translate_writes_only_its_own_lines_and_vtx_tf_log_lets_tensorflow_s_through():
    # What a plain import writes here (oneDNN's notice on x86, the CUDA stubs' where they are):
    # the lines held back, so the test means something only where there are some.
    plain = run(sys.executable, "-c", "import vtx, tensorflow as tf; "
                                      "tf.config.list_physical_devices()")
    theirs = [line for line in plain.stderr.splitlines() if TENSORFLOW_LINE.match(line)]
    assert theirs, plain.stderr  # vtx sets TF_ENABLE_ONEDNN_OPTS=1 on x86: its notice at least
    vtx = os.path.join(os.path.dirname(sys.executable), "vtx")
    command = (vtx, "translate", "--checkpoint", str(TRANSLATION_MODEL), "--precision",
               "float32", "--search-threads", "1")
    quiet = run(*command, stdin="A man is riding a bike.\n")
    assert quiet.returncode == 0, quiet.stderr
    assert quiet.stdout.strip()
    lines = quiet.stderr.splitlines()
    assert lines[0].startswith("precision: float32"), quiet.stderr
    assert not [line for line in lines if TENSORFLOW_LINE.match(line)], quiet.stderr
    shown = run(*command, env={"VTX_TF_LOG": "1"}, stdin="A man is riding a bike.\n")
    assert shown.returncode == 0, shown.stderr
    assert [line for line in shown.stderr.splitlines() if TENSORFLOW_LINE.match(line)]
    assert shown.stdout == quiet.stdout


def test_help_and_a_refused_flag_answer_without_importing_tensorflow():
    code = ("import sys\nfrom vtx_cli.main import main\n"
            "for args in (['translate', '--help'], ['translate', '--beam', '0']):\n"
            "    try:\n        main(args)\n    except SystemExit as end:\n"
            "        print(args[-1], end.code)\n"
            "print('tensorflow' in sys.modules)\n")
    done = run(sys.executable, "-c", code)
    assert done.stdout.splitlines()[-3:] == ["--help 0", "0 2", "False"], done.stderr


def test_held_back_errors_are_written_but_for_those_saying_there_is_no_gpu(capsys):
    held = ("WARNING: All log messages before absl::InitializeLog() is called are written to "
            "STDERR\n"
            "I0000 00:00:1796605304.534393    4543 port.cc:153] oneDNN custom operations are on.\n"
            "E0000 00:00:1796605311.373670    4543 cuda_platform.cc:52] failed call to cuInit: "
            "INTERNAL: CUDA error\n"
            "E0000 00:00:1796605311.373671    4543 dso_loader.cc:77] Could not load libcudnn.so.9\n")
    startup._write_back(held, everything=False)
    assert capsys.readouterr().err.splitlines() == [held.splitlines()[-1]]
    startup._write_back(held, everything=True)  # the import failed: all of it
    assert capsys.readouterr().err == held


def test_vtx_tf_log_is_asked_by_any_value_but_0(monkeypatch):
    for value, asked in (("", False), ("0", False), ("1", True), ("all", True)):
        monkeypatch.setenv("VTX_TF_LOG", value)
        assert startup.shown() is asked


def test_every_command_that_runs_tensorflow_holds_its_start_up_lines_back():
    """Those that run no TensorFlow aside, and `vtx train`, which imports it itself (after its
    XLA flag is set) through `vtx.startup`, as a TensorFlowCommand does."""
    from vtx_cli.main import main
    from vtx_cli.options import TensorFlowCommand

    without = {"preprocess", "average-checkpoints", "score-trees", "prepare-parse", "train"}
    assert without < set(main.commands)
    assert [name for name, command in main.commands.items()
            if name not in without and not isinstance(command, TensorFlowCommand)] == []
