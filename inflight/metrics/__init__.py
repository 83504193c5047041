"""What happened, for Prometheus: the core reports through `observer.Observer`'s hooks (no
prometheus-client below this package), and `prometheus.Metrics` counts what they say."""
