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
