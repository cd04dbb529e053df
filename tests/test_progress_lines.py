"""Progress lines of `vtx translate` and `vtx parse` (a fake clock: no timing)."""

from vtx.progress_lines import LineProgress, format_duration


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_a_line_at_most_every_interval_with_the_share_done_and_the_time_left():
    clock, said = Clock(), []
    progress = LineProgress(said.append, "translated", total=1000, interval=10, clock=clock)
    clock.now += 4
    progress.update(100, ["ein Hund"] * 100)
    assert said == []  # under the interval
    clock.now += 16  # 20 s for 200 lines: 10 lines/s, 800 left
    progress.update(100, ["zwei Hunde laufen"] * 100)
    assert said == ["translated 200 of 1,000 lines (20%) in 0:00:20: 10.0 lines/s, "
                    "about 0:01:20 left"]
    clock.now += 5
    progress.update(100, [""] * 100)
    assert len(said) == 1
    clock.now += 55  # 80 s in all
    progress.update(700, ["x"] * 700)  # all done: the summary says it, not a progress line
    progress.finish()
    assert said[1:] == ["translated 1,000 lines (1,200 words out) in 80.0 s: 12.5 lines/s, "
                        "15 words/s"]


def test_a_stream_of_unknown_length_gets_rates_without_a_share_and_lines_without_words():
    clock, said = Clock(), []
    progress = LineProgress(said.append, "parsed", words=False, interval=10, clock=clock)
    clock.now += 12
    progress.update(6)
    clock.now += 3
    progress.finish()
    assert said == ["parsed 6 lines in 0:00:12: 0.5 lines/s", "parsed 6 lines in 15.0 s: "
                    "0.4 lines/s"]


def test_durations_read_hours_minutes_and_seconds():
    assert format_duration(0) == "0:00:00"
    assert format_duration(59.9) == "0:00:59"  # whole seconds, not rounded up
    assert format_duration(3725) == "1:02:05"
    assert format_duration(-3) == "0:00:00"  # a clock read a little early: no negative time
