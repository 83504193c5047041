"""The retry's target, as pure arithmetic: no sockets."""

from __future__ import annotations

from proxy.policy.retry import retry_limit


def test_a_refusal_naming_the_window_aims_at_its_budget() -> None:
    assert retry_limit(previous=100_000, learned_budget=6_000, sent=7_000, upstream_prompt=None) == 6_000


def test_an_undercount_shrinks_the_limit_by_the_same_factor() -> None:
    # We thought we sent 3,000; the upstream counted 4,000: aim 25% lower than the budget.
    assert retry_limit(previous=3_500, learned_budget=None, sent=3_000, upstream_prompt=4_000) == 2_625


def test_without_numbers_the_target_is_three_quarters_of_what_was_sent() -> None:
    assert retry_limit(previous=100_000, learned_budget=None, sent=8_000, upstream_prompt=None) == 6_000


def test_an_upstream_count_far_off_ours_is_not_taken_as_an_undercount() -> None:
    # More than four times our count is some other figure (cached tokens, images): fall back to 75%.
    assert retry_limit(previous=10_000, learned_budget=None, sent=1_000, upstream_prompt=9_000) == 750


def test_the_target_is_never_below_one_token() -> None:
    assert retry_limit(previous=1, learned_budget=0, sent=0, upstream_prompt=None) == 1
