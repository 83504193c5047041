"""Calibration learns the message text's ratio apart from the fixed part's (tool definitions, reply priming)."""

from __future__ import annotations

import pytest

from inflight.policy.calibration import Calibration

FIXED = 83  # our count of two tool definitions, `tool_choice` and the reply priming (the e2e agent's)


def smollm2(messages: int) -> int:
    """What a llama.cpp server counts for SmolLM2: its chat template leaves the tools out (a few tokens of
    its own framing stand in for them), and its tokenizer makes 1.35 tokens of each of o200k's in code."""
    return 5 + round(1.35 * messages)


def test_a_first_turn_of_tool_definitions_does_not_drag_the_text_ratio() -> None:
    calibration = Calibration()
    calibration.record("smollm2", estimate=FIXED + 40, actual=smollm2(40), fixed=FIXED)
    first = calibration.ratios("smollm2")
    assert smollm2(40) / (FIXED + 40) < 0.5  # the sample's own ratio, which an average of them used to apply to all
    assert first.text > 0.9 and first.fixed < 0.3  # one sample cannot split them: the difference goes to the tools
    calibration.record("smollm2", estimate=FIXED + 800, actual=smollm2(800), fixed=FIXED)
    second = calibration.ratios("smollm2")
    assert second.text == pytest.approx(1.35, abs=0.02)
    assert second.fixed * FIXED == pytest.approx(5, abs=3)
    estimate = 1500 * second.text + FIXED * second.fixed  # the next turn, from what the two taught
    assert estimate == pytest.approx(smollm2(1500), rel=0.01)


@pytest.mark.parametrize("share", [0.3, 0.667, 0.95])
def test_samples_that_all_hold_one_share_are_met_at_that_share(share: float) -> None:
    calibration = Calibration()
    for _ in range(3):
        calibration.record("m", estimate=1000, actual=1800, fixed=round(1000 * (1 - share)))
    ratios = calibration.ratios("m")
    assert ratios.text * share + ratios.fixed * (1 - share) == pytest.approx(1.8)  # however the prior splits it


def test_samples_of_message_text_alone_give_its_ratio_and_leave_the_fixed_part_at_one() -> None:
    calibration = Calibration()
    calibration.record("m", estimate=100, actual=150)
    assert calibration.ratios("m").text == 1.5 and calibration.ratios("m").fixed == 1.0
    assert calibration.ratio("m") == 1.5


def test_a_template_that_renders_tools_larger_is_learned_as_such() -> None:
    calibration = Calibration()
    for messages in (200, 1000, 3000, 6000):  # 400 tokens of tools the template writes out twice as long
        calibration.record("m", estimate=400 + messages, actual=800 + messages, fixed=400)
    ratios = calibration.ratios("m")
    assert ratios.text == pytest.approx(1.0, abs=0.01) and ratios.fixed == pytest.approx(2.0, abs=0.05)


def test_noisy_samples_of_nearly_one_share_do_not_swing_either_ratio() -> None:
    calibration = Calibration()
    for _ in range(8):  # 5% apart in ratio, one point apart in share: the slope they show is noise
        calibration.record("m", estimate=1000, actual=1250, fixed=100)
        calibration.record("m", estimate=1000, actual=1200, fixed=90)
    ratios = calibration.ratios("m")
    assert 1.15 <= ratios.text <= 1.3 and 0.5 <= ratios.fixed <= 2.0


def test_the_last_window_of_samples_is_what_counts() -> None:
    calibration = Calibration(window=4)
    for _ in range(4):
        calibration.record("m", estimate=FIXED + 40, actual=smollm2(40), fixed=FIXED)
    for messages in (500, 1000, 1500, 2000):  # a new conversation: the first turns are forgotten
        calibration.record("m", estimate=messages, actual=2 * messages)
    assert calibration.ratios("m").text == pytest.approx(2.0)


def test_figures_about_something_else_are_not_learned() -> None:
    calibration = Calibration()
    calibration.record("m", estimate=100, actual=1000)  # ten times ours: cached or image tokens, say
    calibration.record("m", estimate=1000, actual=100, fixed=100)  # a tenth of 900 tokens of text: no tokenizer
    calibration.record("m", estimate=100, actual=150, fixed=100)  # no message text: nothing to learn from
    calibration.record("m", estimate=0, actual=150)
    assert calibration.report() == {}
    # Tools the template drops, beside a little text: a tenth of ours is plausible, and learned.
    calibration.record("m", estimate=1000, actual=100, fixed=800)
    assert calibration.report()["m"]["samples"] == 1


def test_the_report_pools_every_tenants_samples_and_says_how_much_was_text() -> None:
    calibration = Calibration()
    calibration.record("smollm2", estimate=FIXED + 40, actual=smollm2(40), fixed=FIXED, tenant="a")
    calibration.record("smollm2", estimate=FIXED + 800, actual=smollm2(800), fixed=FIXED, tenant="b")
    report = calibration.report()["smollm2"]
    assert report["samples"] == 2
    assert report["message_share"] == round((40 / (FIXED + 40) + 800 / (FIXED + 800)) / 2, 4)
    assert report["ratio"] == pytest.approx(1.35, abs=0.02) and report["fixed_ratio"] < 0.1
    assert calibration.ratios("smollm2", tenant="a").text < 1.0  # each tenant's own still learned apart
