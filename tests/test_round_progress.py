"""The round's progress line: its clock reads as a person reads time, for any length of round, and
where each running trial is inside its epoch reads back to the position the trial posted."""

from __future__ import annotations

import re
from types import SimpleNamespace

from hypothesis import given
from hypothesis import strategies as st

from forge_ml.progress import LONGEST_LEFT_S, Position, minutes
from forge_ml.tuning.steps import POST_EVERY_S, SHOWN, _Board, describe, poster


@given(st.floats(0, 10 * 24 * 3600, allow_nan=False))
def test_a_rounds_time_reads_back_to_the_second_or_the_minute(seconds):
    text = minutes(seconds)
    if m := re.fullmatch(r"(\d+) s", text):
        assert int(m[1]) == int(seconds) < 60
    elif m := re.fullmatch(r"(\d+) min (\d+) s", text):
        assert 1 <= int(m[1]) < 60 and int(m[2]) < 60 and int(m[1]) * 60 + int(m[2]) == int(seconds)
    else:
        m = re.fullmatch(r"(\d+) h (\d\d) min", text)
        assert m, text
        assert int(m[2]) < 60 and int(m[1]) * 3600 + int(m[2]) * 60 == int(seconds) // 60 * 60


TRIAL_IDS = st.text("0123456789abcdef", min_size=8, max_size=8)


@given(
    st.dictionaries(
        TRIAL_IDS,
        st.builds(Position, st.floats(0, 50, allow_nan=False), st.floats(0, 1, allow_nan=False)),
        max_size=8,
    ),
    st.lists(TRIAL_IDS, max_size=8, unique=True),
)
def test_each_running_trial_reads_back_as_the_epoch_and_share_it_posted(positions, running):
    text = describe(positions, running)
    posted = [t for t in running if t in positions]
    if not posted:
        assert text == ""
        return
    shown = re.findall(r"([0-9a-f]{8}) epoch (\d+) at (\d+) %(?: \(about ([^)]+) to go\))?", text)
    assert [s[0] for s in shown] == posted[:SHOWN]  # in the round's order, the first few
    for trial_id, epoch, share, left in shown:
        p = positions[trial_id]
        # epoch 1 runs from 0.0 to 1.0, and 1.0 reads as its end (100 %), not as epoch 2 begun
        assert int(epoch) >= 1 and int(epoch) - 1 <= p.epoch <= int(epoch)
        done = p.epoch - (int(epoch) - 1)
        assert 0 <= int(share) <= 100 and int(share) / 100 <= done + 1e-9 and done < (int(share) + 1) / 100
        # a time to go once the trial's speed is known, while the epoch has some way to go, unless
        # the trial is too slow for it to say anything
        assert bool(left) == (
            p.epochs_per_s > 0 and done < 1 and (1 - done) / p.epochs_per_s <= LONGEST_LEFT_S
        )
    more = len(posted) - SHOWN
    assert text.endswith(f" and {more} more") == (more > 0)


def test_a_trial_posts_its_first_step_then_at_most_every_interval_with_its_speed():
    board, clock = _Board(), [100.0]

    handle = SimpleNamespace(post=SimpleNamespace(remote=board.post))  # an actor handle's call form
    post = poster(handle, "abc", clock=lambda: clock[0])
    post(0.0)
    assert board.read() == {"abc": Position(0.0, 0.0)}  # the first step: where, speed not yet known
    clock[0] += POST_EVERY_S / 2
    post(0.1)
    assert board.read()["abc"].epoch == 0.0  # too soon after the last post
    clock[0] += POST_EVERY_S / 2
    post(0.2)
    got = board.read()["abc"]
    assert got.epoch == 0.2 and abs(got.epochs_per_s - 0.2 / POST_EVERY_S) < 1e-12
    assert abs(got.seconds_left_in_epoch() - 0.8 / (0.2 / POST_EVERY_S)) < 1e-6
