FROM python:3.12-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
WORKDIR /app
COPY pyproject.toml README.md constraints.txt /src/
COPY inflight /src/inflight
# The product as `.ci/run` tests it: the wheel built from the source, installed against constraints.txt (the
# dependency set the tests ran with), the source then removed. With the `telemetry` extra:
# OTEL_EXPORTER_OTLP_ENDPOINT on the container turns traces on.
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /tmp/dist /src \
    && pip install --no-cache-dir --constraint /src/constraints.txt "$(ls /tmp/dist/inflight-*.whl)[telemetry]" \
    && rm -rf /tmp/dist /src && useradd --create-home --uid 10001 inflight \
    && mkdir -p /var/lib/inflight && chown inflight /var/lib/inflight
COPY config/inflight.yaml /etc/inflight/config.yaml
# A relative SQLite path in state.url (the example's sqlite:///inflight.db) resolves here, not under
# /app (which the inflight user cannot write): compaction records, and the archive when it is on, go
# to this volume and outlive the container. state.url may name Redis instead (INFLIGHT_STATE_URL).
ENV INFLIGHT_DATA_DIR=/var/lib/inflight
VOLUME /var/lib/inflight

USER inflight
EXPOSE 8787
# The container listens on all interfaces; the file's default (127.0.0.1) is for local use. On an
# address other than loopback the proxy refuses to start in two cases, saying why: the config sets
# upstream.api_key without access.keys (anyone who reaches the port would spend that key), or
# archive.enabled without access.admin_keys or access.keys (anyone could read the conversations).
# Forwarding each client's own key (upstream.api_key empty, the example's default) with the archive
# off needs neither.
CMD ["inflight", "serve", "--config", "/etc/inflight/config.yaml", "--host", "0.0.0.0"]
# `inflight health` reads the same config as the server (listen.port), so a mounted config with
# another port keeps the check right; pass it the same --port if you give one to serve.
HEALTHCHECK --interval=30s --timeout=5s --start-period=10s --retries=3 \
  CMD ["inflight", "health", "--config", "/etc/inflight/config.yaml", "--timeout", "3"]
