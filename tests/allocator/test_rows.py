"""`allocator.policies.rows`: a row's sum and test, column by column, agree with numpy's own reductions."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from numpy.testing import assert_allclose, assert_array_equal

from allocator.policies.rows import row_any, row_sum

RATES = st.floats(min_value=0.0, max_value=1e12, allow_nan=False) | st.sampled_from([0.0, 1e-9, 1e9])


@given(hnp.arrays(np.float64, hnp.array_shapes(min_dims=2, max_dims=2, max_side=12), elements=RATES))
def test_a_row_sum_rounds_as_numpy_does_up_to_seven_columns(values: np.ndarray) -> None:
    total = row_sum(values)
    assert total.dtype == np.float64 and total.shape == (len(values),)
    if values.shape[1] < 8:
        assert_array_equal(total, values.sum(axis=1))  # the same order of additions, bit for bit
    else:
        assert_allclose(total, values.sum(axis=1), rtol=1e-12)


@given(hnp.arrays(np.bool_, hnp.array_shapes(min_dims=2, max_dims=2, max_side=12)))
def test_a_mask_is_counted_and_tested_per_row(mask: np.ndarray) -> None:
    counted = row_sum(mask)
    assert counted.dtype == np.int64
    assert_array_equal(counted, mask.sum(axis=1))
    assert_array_equal(row_any(mask), mask.any(axis=1))
    every_other = mask[:, ::2]  # not contiguous: tested column by column, not a row as one word
    assert_array_equal(row_any(every_other), every_other.any(axis=1))


@given(hnp.arrays(np.float64, hnp.array_shapes(min_dims=2, max_dims=2, max_side=9), elements=RATES))
def test_any_of_a_float_row_is_any_entry_not_zero(values: np.ndarray) -> None:
    assert_array_equal(row_any(values), values.any(axis=1))


def test_rows_of_no_columns_sum_to_zero_and_hold_nothing() -> None:
    assert_array_equal(row_sum(np.zeros((3, 0))), [0.0, 0.0, 0.0])
    assert_array_equal(row_any(np.zeros((3, 0), dtype=bool)), [False, False, False])
