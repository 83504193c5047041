"""Everything between a parsed request and the bytes sent upstream: count, account, compact, learn.

`engine.Pipeline` runs the steps in order; `accounting` holds a counted request and its size against
its window; `parts` builds one request's compactor and background job; `outgoing` holds the body to send
and what the proxy reports about it; `turn` and `compact_turn` decide each request's steps without I/O;
`summarizer` calls the summarizer model through the upstream client; `archiving` builds the archive's
entries for a turn; `evaluation` replays traces through the same pipeline (`inflight eval`).
"""
