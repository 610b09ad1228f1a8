"""Id runs and id ranges of the ``lcm`` engine: the compact form of its persisted ranges must lose no id."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from plugins.context_engine.lcm.ids import RangeError, encode_runs, expand_runs, runs_text, select_range, split_range

ids = st.one_of(
    st.integers(0, 400).map(str),
    st.integers(0, 400).map(lambda n: f"m{n:05d}"),
    st.integers(0, 400).map(lambda n: f"m-{n}"),
    st.text("ab-_9", min_size=1, max_size=4),
)


@given(st.lists(ids, max_size=60))
def test_runs_expand_back_to_exactly_the_ids_in_order(values):
    assert expand_runs(encode_runs(values)) == values


def test_consecutive_ids_collapse_and_padding_is_kept():
    assert encode_runs([str(n) for n in range(4, 34)] + ["57", "34"]) == [["4", "33"], "57", "34"]
    assert encode_runs(["m00998", "m00999", "m01000"]) == [["m00998", "m01000"]]
    assert encode_runs(["m-9", "m-10", "x"]) == [["m-9", "m-10"], "x"]
    assert runs_text([["4", "33"], "57"]) == "4..33, 57"


def test_a_numbered_range_means_every_id_between_in_number_order():
    messages = [{"_id": str(n)} for n in (1, 2, 3, 57, 20, 21, 22, 5, 4)]
    assert [m["_id"] for m in select_range(messages, *split_range("3..21"))] == ["3", "4", "5", "20", "21"]
    assert [m["_id"] for m in select_range(messages, *split_range("21…3"))] == ["3", "4", "5", "20", "21"]


def test_other_ids_range_by_position_and_unknown_ends_are_refused():
    messages = [{"_id": name} for name in ("sys", "alpha", "beta", "gamma")]
    assert [m["_id"] for m in select_range(messages, "alpha", "gamma")] == ["alpha", "beta", "gamma"]
    with pytest.raises(RangeError):
        select_range(messages, "alpha", "delta")
    with pytest.raises(RangeError):
        split_range("..7")
