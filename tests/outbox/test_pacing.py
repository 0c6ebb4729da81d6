"""The pace of a batch's deliveries (`outbox.pacing`): steps a whole multiple of the
workers, as long as the channel takes in a third of the bound, and a value let through a
step's re-check young enough for the step's last delivery to start within the bound."""

from __future__ import annotations

import datetime as dt

from outbox.pacing import Pace


def test_the_first_step_is_one_delivery_per_worker_all_starting_at_once():
    pace = Pace(workers=8, bound=30)
    assert pace.step_size() == 8
    assert pace.fresh_within(8) == dt.timedelta(seconds=30)


def test_a_slow_channel_gets_steps_it_keeps_up_with_and_values_young_enough_for_them():
    pace = Pace(workers=8, bound=30)
    pace.measured(8, 2.0)  # 4 a second: a push service answering in 2 s
    assert pace.step_size() == 48  # 8 at once, and 40 more in 10 s
    # The last of 48 starts 10 s after the first: a value may be 30 − 1.5 × 10 s old.
    assert pace.fresh_within(48) == dt.timedelta(seconds=15)


def test_a_step_is_a_whole_multiple_of_the_workers():
    pace = Pace(workers=2, bound=6)
    pace.measured(2, 2.5)
    assert pace.step_size() == 4


def test_a_quick_channel_takes_the_rest_of_the_batch_in_one_step():
    pace = Pace(workers=8, bound=30)
    pace.measured(8, 0.05)  # 160 a second
    assert pace.step_size() >= 1600
    # 500 deliveries start within 3 s: values fetched for the batch a moment ago serve them.
    assert pace.fresh_within(500) > dt.timedelta(seconds=25)


def test_a_step_whose_deliveries_were_all_held_back_says_nothing_of_the_pace():
    pace = Pace(workers=8, bound=30)
    pace.measured(0, 0.01)
    assert pace.per_second is None
