"""SWE-agent's demonstration, as it sends it: for the tests and benchmarks of text-action agents."""

from __future__ import annotations

DEMONSTRATION = (  # SWE-agent's template (a user message between its system prompt and the issue)
    "Here is a demonstration of how to correctly accomplish this task.\n"
    "It is included to show you how to correctly use the interface.\n"
    "You do not need to follow exactly what is done in the demonstration.\n"
    "--- DEMONSTRATION ---\n{demonstration}\n--- END OF DEMONSTRATION ---\n"
)


def demonstration(shown: str) -> dict[str, str]:
    """The user message that shows a solved task, `shown`, in SWE-agent's template."""
    return {"role": "user", "content": DEMONSTRATION.format(demonstration=shown)}
