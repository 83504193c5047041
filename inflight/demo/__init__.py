"""`inflight demo`: see inflight work with no key and no network.

A recorded SWE-agent conversation (shipped here, gzip'd) is replayed turn by turn through a real
inflight server in front of a scripted upstream (`upstream.py`), both on loopback ports in this
process, at a window small enough that compaction happens; the table (`report.py`) says what each
turn sent and what inflight did. `run.py` starts the servers and replays.
"""

from inflight.demo.run import DemoError, DemoOptions, run_demo

__all__ = ["DemoError", "DemoOptions", "run_demo"]
