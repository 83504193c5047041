"""The retry's target, as pure arithmetic: no sockets."""

from __future__ import annotations

from inflight.compaction.draft import Budget
from inflight.config import Compaction
from inflight.policy.retry import RetryAim, retry_limit


def test_a_refusal_naming_the_window_aims_at_its_budget() -> None:
    aim = retry_limit(previous=100_000, learned_budget=6_000, sent=7_000, upstream_prompt=None)
    assert aim == RetryAim(6_000, blind=False)


def test_an_undercount_shrinks_the_limit_by_the_same_factor() -> None:
    # We thought we sent 3,000; the upstream counted 4,000: aim 25% lower than the budget.
    aim = retry_limit(previous=3_500, learned_budget=None, sent=3_000, upstream_prompt=4_000)
    assert aim == RetryAim(2_625, blind=False)


def test_a_learned_window_and_an_undercount_are_two_measurements_applied_once_each() -> None:
    aim = retry_limit(previous=100_000, learned_budget=8_000, sent=9_000, upstream_prompt=10_000)
    assert aim == RetryAim(7_200, blind=False)


def test_without_numbers_the_goal_is_three_quarters_of_what_was_sent() -> None:
    aim = retry_limit(previous=100_000, learned_budget=None, sent=8_000, upstream_prompt=None)
    assert aim == RetryAim(6_000, blind=True)


def test_a_window_that_changes_nothing_is_no_number_at_all() -> None:
    # The refusal names the window we already knew; what we sent fit it by our count: our count is off.
    aim = retry_limit(previous=8_000, learned_budget=8_000, sent=5_000, upstream_prompt=None)
    assert aim == RetryAim(3_750, blind=True)


def test_an_upstream_count_far_off_ours_is_not_taken_as_an_undercount() -> None:
    # More than four times our count is some other figure (cached tokens, images): fall back to 75%.
    aim = retry_limit(previous=10_000, learned_budget=None, sent=1_000, upstream_prompt=9_000)
    assert aim == RetryAim(750, blind=True)


def test_the_target_is_never_below_one_token() -> None:
    assert retry_limit(previous=1, learned_budget=0, sent=0, upstream_prompt=None).limit == 1


def test_a_blind_goal_is_not_shrunk_again_by_the_compaction_target() -> None:
    # The compounding seen on the old main: target (0.5) of a limit already 0.75 of what was sent.
    aim = retry_limit(previous=100_000, learned_budget=None, sent=8_000, upstream_prompt=None)
    assert Budget.exactly(aim.limit).target == 6_000
    assert Budget.of(aim.limit, Compaction()).target == 3_000  # what the old retry aimed at
