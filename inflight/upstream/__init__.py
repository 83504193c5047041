"""The upstream side: the connection pool, addressing and headers, and relaying what comes back."""
