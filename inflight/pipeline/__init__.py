"""Everything between a parsed request and the bytes sent upstream: count, account, compact, learn.

`engine.Pipeline` puts the steps in order; `accounting` holds a counted request and what it costs
against its window; `parts` builds one request's compactor and background job; `outgoing` is the
body to send and what the proxy says about it; `summarizer` calls the summarizer model through the
upstream client; `evaluation` replays traces through the same pipeline (`inflight eval`).
"""
