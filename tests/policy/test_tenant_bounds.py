"""The per-client maps of the policy stay bounded whatever number of client keys arrive, and keep the active ones.

A client that sends a new key with every request is a new tenant each time (`tenant_of`). The window
brackets, the reply sizes and the calibration are kept per (client, model): each keeps the most recently
seen `MAX_ENTRIES` pairs, so a flood of new keys costs at most that many entries, and a client still sending
keeps its figures through it.
"""

from __future__ import annotations

import pytest

from inflight.policy import bracket, reserve
from inflight.policy.bracket import WindowBrackets
from inflight.policy.calibration import Calibration
from inflight.policy.reserve import MIN_SAMPLES, OutputSizes
from inflight.policy.tenants import tenant_of

MODEL = "gpt-4o-mini"


def tenant(number: int) -> str:
    return tenant_of([(b"authorization", f"Bearer sk-{number:08d}".encode())])


def test_the_window_brackets_keep_at_most_so_many_clients_and_the_active_one() -> None:
    brackets = WindowBrackets()
    active = tenant(-1)
    keys = 3 * bracket.MAX_ENTRIES
    for number in range(keys):
        brackets.accepted(MODEL, 1000 + number, tenant=tenant(number))
        brackets.accepted(MODEL, 500, tenant=active)  # one request of the active client between two new keys
    brackets.accepted(MODEL, 1000 + keys, tenant=active)
    kept = sum(brackets.largest_answered(MODEL, tenant=tenant(number)) > 0 for number in range(keys))
    assert kept < bracket.MAX_ENTRIES  # the active client holds one of them
    assert brackets.largest_answered(MODEL, tenant=tenant(0)) == 0  # the least recently seen: forgotten
    assert brackets.largest_answered(MODEL, tenant=tenant(keys - 1)) == 1000 + keys - 1
    assert brackets.largest_answered(MODEL, tenant=active) == 1000 + keys


def test_the_reply_sizes_keep_at_most_so_many_clients_and_the_active_one() -> None:
    sizes = OutputSizes()
    active = tenant(-1)
    keys = 3 * reserve.MAX_ENTRIES
    for number in range(keys):
        for _ in range(MIN_SAMPLES):
            sizes.record(MODEL, 10_000, tenant=tenant(number))
        sizes.record(MODEL, 20_000, tenant=active)
    kept = sum(sizes.reserve(MODEL, tenant=tenant(number)) is not None for number in range(keys))
    assert kept < reserve.MAX_ENTRIES
    assert sizes.reserve(MODEL, tenant=tenant(0)) is None
    assert sizes.reserve(MODEL, tenant=tenant(keys - 1)) == 15_000  # 10,000 with the margin
    assert sizes.reserve(MODEL, tenant=active) == 30_000


def test_the_calibration_keeps_at_most_so_many_clients_and_the_active_one() -> None:
    calibration = Calibration()
    active = tenant(-1)
    max_entries = calibration.max_entries
    keys = 3 * max_entries
    for number in range(keys):
        calibration.record(MODEL, estimate=1000, actual=1500, tenant=tenant(number))
        calibration.record(MODEL, estimate=1000, actual=1200, tenant=active)
    kept = sum(calibration.ratio(MODEL, tenant=tenant(number)) != 1.0 for number in range(keys))
    assert kept < max_entries
    assert calibration.ratio(MODEL, tenant=tenant(0)) == 1.0  # forgotten: it starts again from our own count
    assert calibration.ratio(MODEL, tenant=tenant(keys - 1)) == pytest.approx(1.5)
    assert calibration.ratio(MODEL, tenant=active) == pytest.approx(1.2)
