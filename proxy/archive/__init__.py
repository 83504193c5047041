"""The archive: every turn's tokens and what each compaction dropped, for `/inflight/ui` (`archive.enabled`)."""
