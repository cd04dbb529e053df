import pytest

from vtx.training.schedule import TransformerSchedule, paper_learning_rate


@pytest.mark.parametrize("step", [1, 4000, 100_000])
def test_schedule_equals_the_papers_formula(step):
    expected = 512**-0.5 * min(step**-0.5, step * 4000**-1.5)
    assert float(paper_learning_rate(step, 512, 4000)) == pytest.approx(expected, rel=1e-6)


def test_keras_schedule_counts_the_first_update_as_step_one():
    schedule = TransformerSchedule(d_model=512, warmup_steps=4000, scale=2.0)
    assert float(schedule(0)) == pytest.approx(2 * 512**-0.5 * 4000**-1.5, rel=1e-6)
    assert float(schedule(3999)) == pytest.approx(2 * 512**-0.5 * 4000**-0.5, rel=1e-6)


def test_peak_is_at_warmup():
    rates = [float(paper_learning_rate(s, 512, 4000)) for s in (3999, 4000, 4001)]
    assert rates[1] == max(rates)


def test_the_cooldown_falls_linearly_to_zero_after_its_last_update():
    schedule = TransformerSchedule(d_model=16, warmup_steps=1)
    schedule.set_cooldown((4, 7))  # updates 5, 6, 7 at 3/4, 2/4, 1/4 of the paper's rate
    factors = [float(schedule(step - 1)) / float(paper_learning_rate(step, 16, 1))
               for step in range(1, 9)]
    assert factors == pytest.approx([1, 1, 1, 1, 0.75, 0.5, 0.25, 0])
    schedule.set_cooldown(None)
    assert float(schedule(6)) == pytest.approx(float(paper_learning_rate(7, 16, 1)))
