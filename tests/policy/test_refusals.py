"""Which refusals' numbers fit the request they refused (the wordings themselves: `tests/http/test_retry.py`)."""

from __future__ import annotations

import pytest

from inflight.policy.refusals import Refusal, agrees


@pytest.mark.parametrize(
    ("window", "prompt", "answered", "fits"),
    [
        (2_000, 2_400, 0, True),  # what an upstream says of a 2,400-token request
        (None, 3_100, 0, True),  # another tokenizer counts more
        (None, None, 0, True),  # no numbers: nothing to check
        (300, 40, 0, False),  # a prompt count a fiftieth of ours is not of this request
        (2_000, 40_000, 0, False),
        (300, 2_400, 1_000, False),  # a window below a prompt this client had answered
        (50_000, None, 0, False),  # a window far above what was sent and the reply's room: not why it was refused
        (9_000, None, 0, True),  # within the reply's room (1,000) and a tokenizer's slack
    ],
)
def test_a_refusal_is_believed_only_with_numbers_that_fit(
    window: int | None, prompt: int | None, answered: int, fits: bool
) -> None:
    refusal = Refusal("openai", context_window=window, prompt_tokens=prompt)
    assert agrees(refusal, sent=2_400, output_limit=1_000, answered=answered) is fits
