"""What the prompt cache can serve of a request: the common prefix with the one before, and whose rewrite it was."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from inflight.compaction.prefix import (
    ID_BYTES,
    CacheFigures,
    LastSent,
    PrefixTracker,
    SentRequest,
    common_messages,
    compare,
)


def ids(*names: str) -> list[bytes]:
    return [name.encode().ljust(ID_BYTES, b".") for name in names]


def request(sent: list[str], client: list[str] | None = None, *, fixed: int = 100) -> SentRequest:
    return SentRequest.of(b"".join(ids(*sent)), [10] * len(sent), fixed=fixed, client=ids(*(client or sent)))


def last(sent: list[str], client: list[str] | None = None) -> LastSent:
    return LastSent.of(request(sent, client))


def test_a_request_that_extends_the_previous_one_is_served_up_to_its_end() -> None:
    turn = compare(last(["s", "u", "a1", "t1"]), request(["s", "u", "a1", "t1", "a2", "t2"]))
    assert (turn.tokens, turn.cached, turn.rewrite) == (160, 140, False)


def test_a_compaction_that_changes_an_earlier_message_is_a_rewrite_served_up_to_the_change() -> None:
    before = last(["s", "u", "a1", "t1", "a2", "t2"])
    after = request(
        ["s", "u", "a1", "masked-t1", "a2", "t2", "a3", "t3"], ["s", "u", "a1", "t1", "a2", "t2", "a3", "t3"]
    )
    turn = compare(before, after)
    assert turn.cached == 130 and turn.rewrite


def test_a_client_that_rewrote_its_own_history_is_no_rewrite_of_ours() -> None:
    before = last(["s", "u", "a1", "t1"])
    turn = compare(before, request(["s", "u", "its-own-summary"]))
    assert turn.cached == 120 and not turn.rewrite


def test_the_first_request_of_a_conversation_is_served_nothing() -> None:
    tracker = PrefixTracker(1 << 20)
    assert tracker.observe("k", request(["s", "u"])).cached == 0
    assert tracker.observe("k", request(["s", "u", "a", "t"])).cached == 120
    assert tracker.observe("other", request(["s", "u"])).cached == 0


def test_figures_are_rewrites_per_100_turns_and_the_cached_share() -> None:
    assert CacheFigures().rewrites_per_100_turns is None and CacheFigures().cached_share is None
    figures = CacheFigures()
    tracker = PrefixTracker(1 << 20)
    client = ["s", "u", "a1", "t1", "a2", "t2"]
    figures.add(tracker.observe("k", request(client[:4])))
    figures.add(tracker.observe("k", request(client)))
    client += ["a3", "t3"]
    figures.add(tracker.observe("k", request(["s", "u", "sum", "a2", "t2", "a3", "t3"], client)))
    client += ["a4", "t4"]
    figures.add(tracker.observe("k", request(["s", "u", "sum", "a2", "t2", "a3", "t3", "a4", "t4"], client)))
    assert figures.turns == 4 and figures.rewrites == 1 and figures.rewrites_per_100_turns == 25
    assert figures.cached == 0 + 140 + 120 + 170 and figures.tokens == 140 + 160 + 170 + 190


@given(st.lists(st.sampled_from("abc"), max_size=12), st.lists(st.sampled_from("abc"), max_size=12))
def test_the_common_prefix_is_found_as_a_message_by_message_walk_finds_it(first: list[str], second: list[str]) -> None:
    walked = 0
    while walked < min(len(first), len(second)) and first[walked] == second[walked]:
        walked += 1
    assert common_messages(b"".join(ids(*first)), b"".join(ids(*second))) == walked


def test_the_tracker_holds_at_most_its_bytes_the_least_recent_conversations_going_first() -> None:
    one = LastSent.of(request(["s", "u", "a", "t"])).size("a")
    tracker = PrefixTracker(3 * one)
    for key in ("a", "b", "c", "d"):
        tracker.observe(key, request(["s", "u", "a", "t"]))
    assert tracker.observe("d", request(["s", "u", "a", "t"])).cached == 140  # kept
    assert tracker.observe("a", request(["s", "u", "a", "t"])).cached == 0  # the oldest: forgotten
    huge = request([f"m{i}" for i in range(100)])
    assert tracker.observe("huge", huge).cached == 0 and tracker.observe("huge", huge).cached == 0  # never kept
