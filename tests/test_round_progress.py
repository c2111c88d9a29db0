"""The round's progress clock reads as a person reads time, for any length of round."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from forge_ml.tuning.callback import _minutes


@given(st.floats(0, 10 * 24 * 3600, allow_nan=False))
def test_a_rounds_time_reads_back_to_the_second_or_the_minute(seconds):
    text = _minutes(seconds)
    if m := re.fullmatch(r"(\d+) s", text):
        assert int(m[1]) == int(seconds) < 60
    elif m := re.fullmatch(r"(\d+) min (\d+) s", text):
        assert 1 <= int(m[1]) < 60 and int(m[2]) < 60 and int(m[1]) * 60 + int(m[2]) == int(seconds)
    else:
        m = re.fullmatch(r"(\d+) h (\d\d) min", text)
        assert m, text
        assert int(m[2]) < 60 and int(m[1]) * 3600 + int(m[2]) * 60 == int(seconds) // 60 * 60
