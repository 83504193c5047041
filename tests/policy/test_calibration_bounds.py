"""Calibration and learned windows: bounded maps, clipped keys, and a ratio per tenant."""

from __future__ import annotations

from inflight.config import load_settings
from inflight.policy.calibration import Calibration
from inflight.policy.windows import ContextRegistry


def test_calibration_forgets_the_least_recent_models_and_clips_long_names() -> None:
    calibration = Calibration(max_entries=8, max_key_chars=64)
    for n in range(100):
        calibration.record(f"model-{n}-" + "x" * 100_000, estimate=100, actual=150)
    report = calibration.report()
    assert len(report) == 8 and all(len(model) <= 64 for model in report)
    assert calibration.ratio("model-99-" + "x" * 100_000) == 1.5
    assert calibration.ratio("model-0-" + "x" * 100_000) == 1.0  # forgotten


def test_one_tenant_cannot_move_another_tenants_ratio() -> None:
    calibration = Calibration()
    for _ in range(16):  # large tool definitions: the upstream counts twice what we do
        calibration.record("local-llama", estimate=1000, actual=2060, tenant="a")
    calibration.record("local-llama", estimate=1000, actual=1000, tenant="b")
    assert round(calibration.ratio("local-llama", tenant="a"), 2) == 2.06
    assert calibration.ratio("local-llama", tenant="b") == 1.0
    assert calibration.ratio("local-llama", tenant="c") == 1.0  # a newcomer starts from our own count


def test_learned_windows_are_bounded_and_keyed_by_a_clipped_name() -> None:
    registry = ContextRegistry(load_settings(None, overrides={"limits": {"max_key_chars": 64}}))
    for n in range(5000):
        registry.learn(f"m{n}-" + "y" * 10_000, 1000 + n)
    learned = registry.learned()
    assert len(learned) <= 4096 and all(len(key) <= 1 + 64 for key in learned)  # ":" (no client key) and the model
    assert registry.resolve("m4999-" + "y" * 10_000).context_window == 5999
    assert registry.resolve("m4999-" + "y" * 10_000 + "z").source != "learned"  # a different name, a different key
