"""Summaries made in the background, before the turn that needs them arrives.

`scheduler` runs the jobs (one per conversation, in a bounded pool); `ahead` decides what a job summarizes
(up to the cut the next compaction will need); `jobs` starts a conversation's job and saves its summary.
`inflight.compaction.per_conversation` decides when.
"""
