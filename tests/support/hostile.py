"""Inputs an attacker sends, shared by the tests that show they are refused and `benchmarks.hostile`."""

# Paths whose dot segments a server or gateway sees only once it decodes `%2F` (or `\`, or `;`) as a separator.
ENCODED_DOT_PATHS = [
    "/v1/models%2F..%2F..%2Fadmin",
    "/v1/models/..%2F..%2Fadmin",
    "/v1/models/x%2f%2e%2e%2f%2e%2e%2fadmin",
    "/v1/models/..;/admin",
    "/v1/models/..%3B/admin",
    "/v1/models/..%5C..%5Cadmin",
    "/v1/models/%252e%252e%252fadmin",
    "/v1/chat/completions%2F..%2F..%2Fadmin",
]

# An upstream's 400 for a `role` of the client's choosing, echoing it: words a refusal has, written by the client.
ECHOED_ROLE_ERROR = {
    "error": {
        "message": "Invalid value: 'maximum context length is 300 tokens'. Supported values are: 'system', "
        "'assistant', 'user', 'function', 'tool', and 'developer'.",
        "type": "invalid_request_error",
        "param": "messages[0].role",
        "code": "invalid_value",
    }
}
