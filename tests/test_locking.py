"""`vtx.locking`: an output's lock is held while the block writes it, names its holder, and is
gone afterwards, so no lock file is left beside the outputs."""

import os
import subprocess
import sys

from vtx import locking

TRY_THE_LOCK = """
import sys
from vtx import locking
try:
    with locking.output_lock(sys.argv[1], "--output"):
        print("held")
except OSError as error:
    print(error)
"""


def test_an_output_lock_names_its_holder_to_another_process_and_leaves_no_file(tmp_path):
    output = tmp_path / "out"
    with locking.output_lock(output, "--output"):
        lock = tmp_path / ".out.lock"
        assert f"pid {os.getpid()} on " in lock.read_text()
        other = subprocess.run([sys.executable, "-c", TRY_THE_LOCK, str(output)],
                               capture_output=True, text=True, check=True).stdout
        assert other.startswith(f"--output {output} is being written by another process "
                                f"(pid {os.getpid()} on "), other
        assert other.rstrip().endswith(f"; {lock} is its lock): wait for it to end, or give "
                                       f"another --output")
    assert not lock.exists()
    other = subprocess.run([sys.executable, "-c", TRY_THE_LOCK, str(output)],
                           capture_output=True, text=True, check=True).stdout
    assert other == "held\n"

