FROM python:3.12-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
WORKDIR /app
COPY pyproject.toml README.md ./
COPY proxy ./proxy
RUN pip install --no-cache-dir . && useradd --create-home --uid 10001 inflight \
    && mkdir -p /var/lib/inflight && chown inflight /var/lib/inflight
COPY config/inflight.yaml /etc/inflight/config.yaml
# Compaction records survive a restart of the container when this is a volume (state.url in the config).
ENV INFLIGHT_STATE_URL=sqlite:////var/lib/inflight/inflight.db
VOLUME /var/lib/inflight

USER inflight
EXPOSE 8787
# The container listens on all interfaces; the file's default (127.0.0.1) is for local use. If your
# config sets upstream.api_key, it must also set access.keys (the keys clients send), or the proxy
# refuses to start: anyone who reaches the port would spend that key. Forwarding each client's own
# key (upstream.api_key empty, the example's default) needs neither.
CMD ["inflight", "serve", "--config", "/etc/inflight/config.yaml", "--host", "0.0.0.0"]
HEALTHCHECK --interval=30s --timeout=3s --start-period=5s --retries=3 \
  CMD python -c "import urllib.request,sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8787/healthz', timeout=2).status == 200 else 1)"
