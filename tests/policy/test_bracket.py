"""Refusals without numbers: the window bracketed by what the upstream answered and refused, per model and client."""

from __future__ import annotations

from inflight.policy.bracket import REFUSAL_TTL_S, Bracket, WindowBrackets
from inflight.policy.reserve import MIN_RESERVE, OutputSizes


def test_no_refusal_no_ceiling() -> None:
    brackets = WindowBrackets()
    brackets.accepted("gpt-5", 50_000)
    assert brackets.ceiling("gpt-5") is None


def test_after_a_refusal_requests_aim_just_below_the_largest_size_answered_below_it() -> None:
    brackets = WindowBrackets()
    for tokens in (20_000, 35_000, 50_000):
        brackets.accepted("gpt-5", tokens)
    brackets.refused("gpt-5", 54_700)
    assert brackets.ceiling("gpt-5") == 49_000  # 2% below 50,000: our count of what is sent may be a little low
    brackets.refused("gpt-5", 56_600)  # a larger refusal teaches nothing new
    assert brackets.ceiling("gpt-5") == 49_000
    brackets.accepted("gpt-5", 52_000)  # answered, and still below the refusal: the window is at least that
    assert brackets.ceiling("gpt-5") == 50_960
    brackets.accepted("gpt-5", 60_000)  # answered above the refusal: the window grew, or it was a passing fault
    assert brackets.ceiling("gpt-5") is None


def test_a_refusal_holds_for_an_hour() -> None:
    bracket = Bracket(accepted=50_000, refused=54_700, refused_at=1_000.0)
    assert bracket.ceiling(1_000.0 + REFUSAL_TTL_S - 1) == 49_000
    assert bracket.ceiling(1_000.0 + REFUSAL_TTL_S + 1) is None


def test_with_nothing_large_answered_the_aim_is_a_quarter_below_the_refusal() -> None:
    brackets = WindowBrackets()
    brackets.accepted("m", 1_000)
    brackets.refused("m", 40_000)
    assert brackets.ceiling("m") == 30_000


def test_one_clients_refusal_bounds_no_other_client() -> None:
    brackets = WindowBrackets()
    brackets.accepted("m", 50_000, tenant="a")
    brackets.refused("m", 54_000, tenant="a")
    assert brackets.ceiling("m", tenant="a") == 49_000
    assert brackets.ceiling("m", tenant="b") is None
    assert brackets.ceiling("other", tenant="a") is None


def test_the_reserve_follows_the_answers_with_a_margin_and_a_floor() -> None:
    outputs = OutputSizes()
    assert outputs.reserve("m") is None
    for tokens in (300, 500, 200):
        outputs.record("m", tokens)
    assert outputs.reserve("m") == MIN_RESERVE  # short answers: the floor
    for tokens in (6_000, 8_000, 7_000):
        outputs.record("m", tokens)
    assert outputs.reserve("m") == 12_000  # the longest of six, with half again
    assert outputs.reserve("m", tenant="other") is None
