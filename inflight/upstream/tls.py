"""The TLS settings for an https upstream: the system's trust store plus certifi's, HTTP/1.1 by ALPN."""

from __future__ import annotations

import ssl

import certifi


def tls_context() -> ssl.SSLContext:
    # The system store honours SSL_CERT_FILE / SSL_CERT_DIR (a private CA); certifi covers slim images without one.
    context = ssl.create_default_context()
    context.load_verify_locations(certifi.where())
    context.set_alpn_protocols(["http/1.1"])
    return context
