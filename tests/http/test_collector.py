"""The garbage collector tuned for `inflight serve`: startup's objects frozen, young collections spaced out."""

import subprocess
import sys

from inflight.app import GC_YOUNG_THRESHOLD

PROBE = """
import gc
from inflight.app import tune_collector
before = gc.get_threshold()
tune_collector()
print(gc.get_freeze_count() > 0, gc.get_threshold()[0], gc.get_threshold()[1:] == before[1:])
"""


def test_a_whole_process_freezes_what_it_started_with_and_spaces_young_collections() -> None:
    # In a process of its own: tuning the collector of the test run itself would change every later test.
    shown = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True).stdout.split()
    assert shown == ["True", str(GC_YOUNG_THRESHOLD), "True"]
