"""A request's count in the upstream's units, and a budget in ours: the text and the fixed part apart."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from inflight.pipeline.accounting import Accounting
from inflight.policy.windows import ModelLimits


def accounting(*, raw: int, fixed: int, ratio: float, fixed_ratio: float) -> Accounting:
    return Accounting(
        model="smollm2",
        encoding="o200k_base",
        exact=False,
        limits=ModelLimits(2048, None, "config"),
        budget=2000,
        raw_tokens=raw,
        ratio=ratio,
        fixed_tokens=fixed,
        fixed_ratio=fixed_ratio,
    )


def test_the_text_and_the_fixed_part_are_each_calibrated_by_their_own_ratio() -> None:
    request = accounting(raw=1083, fixed=83, ratio=1.35, fixed_ratio=0.06)
    assert request.prompt_tokens == 1355  # 1000 x 1.35 + 83 x 0.06 = 1354.98
    assert request.calibrated(583) == 680  # compacted to 500 tokens of text: the tools stay
    assert request.calibrated_text(100) == 135
    assert request.own_units(2000) == 83 + 1477  # the tools, and the text that fits beside them


@settings(max_examples=300, deadline=None)
@given(
    fixed=st.integers(0, 20_000),
    ratio=st.floats(0.25, 4.0),
    fixed_ratio=st.floats(0.0, 4.0),
    limit=st.integers(1, 400_000),
)
def test_a_budget_in_our_units_is_the_most_the_upstream_counts_within_it(
    fixed: int, ratio: float, fixed_ratio: float, limit: int
) -> None:
    request = accounting(raw=fixed + 1, fixed=fixed, ratio=ratio, fixed_ratio=fixed_ratio)
    units = request.own_units(limit)
    assert units == 0 or request.calibrated(units) <= limit
    if fixed * fixed_ratio <= limit:  # the fixed part fits: no more text than that would
        assert request.calibrated(units + 1) > limit


def test_an_exact_count_sets_the_texts_ratio_and_keeps_the_fixed_parts() -> None:
    request = accounting(raw=1083, fixed=83, ratio=1.0, fixed_ratio=0.06)
    counted = request.counted_as(1355)
    assert counted.prompt_tokens == 1355 and counted.fixed_ratio == 0.06
    assert round(counted.ratio, 3) == 1.350
    # A count that no text ratio within bounds explains: one ratio for all of it, as the upstream counted.
    odd = request.counted_as(5000)
    assert odd.prompt_tokens == 5000 and odd.ratio == odd.fixed_ratio
