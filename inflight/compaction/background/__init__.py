"""Summaries made in the background, before the turn that needs them comes.

`scheduler` runs jobs (one per conversation, a bounded pool); `ahead` says what a job summarizes
(the cut the next compaction will need); `jobs` starts a conversation's job and keeps what it made.
`inflight.compaction.per_conversation` decides when.
"""
