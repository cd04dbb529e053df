import shutil

import pytest

from vtx.training.profile import StepProfiler, parse_steps


def test_steps_are_first_and_last_or_one_step():
    assert parse_steps("500:510") == (500, 510)
    assert parse_steps("7") == (7, 7)
    with pytest.raises(ValueError, match="'9:3': FIRST:LAST needs 1 <= FIRST <= LAST"):
        parse_steps("9:3")
    with pytest.raises(ValueError, match="'x' is not FIRST:LAST"):
        parse_steps("x")


def test_a_run_resumed_after_the_range_profiles_nothing_and_says_so(tmp_path):
    said = []
    profiler = StepProfiler((2, 3), tmp_path / "profile", said.append)
    profiler.at(8)
    profiler.at(9)
    profiler.stop(9)
    assert said == ["--profile: updates 2-3 were made before this run (it resumed at step 8): "
                    "nothing profiled"]
    assert not (tmp_path / "profile").exists()


def test_a_run_that_stops_before_the_range_says_nothing_was_profiled(tmp_path):
    said = []
    profiler = StepProfiler((20, 30), tmp_path / "profile", said.append)
    profiler.at(0)
    profiler.at(4)
    profiler.stop(4)  # --max-minutes, a stop signal, an error before update 19
    profiler.stop(4)
    assert said == ["--profile: the run stopped at step 4, before update 20: nothing profiled"]
    assert not (tmp_path / "profile").exists()


def test_a_trace_folder_that_cannot_be_made_is_said_and_training_goes_on(tmp_path):
    (tmp_path / "profile").write_text("")  # a file where the folder goes
    said = []
    profiler = StepProfiler((2, 3), tmp_path / "profile", said.append)
    profiler.at(1)  # not raised: the run would end unsaved, its updates lost
    profiler.at(3)
    profiler.stop(3)
    assert len(said) == 1 and said[0].startswith("--profile: could not start TensorFlow's "
                                                 "profiler into " + str(tmp_path / "profile"))


def test_a_trace_that_cannot_be_written_is_said_not_raised(tmp_path):
    """The run's own end stands (a saved SIGINT exits 130, not with a traceback)."""
    said = []
    profiler = StepProfiler((2, 3), tmp_path / "profile", said.append)
    profiler.at(1)
    shutil.rmtree(tmp_path / "profile")
    (tmp_path / "profile").write_text("")  # the trace's folder gone (a full or lost disk)
    profiler.stop(2)
    assert said[0].startswith("profiling updates 2-3 into ")
    assert said[1].startswith("--profile: the trace of updates 2-2 could not be written under "
                              + str(tmp_path / "profile"))
    profiler.stop(2)
    assert len(said) == 2
