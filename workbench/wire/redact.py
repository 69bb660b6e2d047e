"""Secrets out before anything is written: headers, query parameters, cookies, capped bodies."""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

REDACTED = "[redacted]"
SECRET_REQUEST_HEADERS = frozenset(
    {"authorization", "x-api-key", "api-key", "cookie", "proxy-authorization", "x-goog-api-key"}
)
SECRET_RESPONSE_HEADERS = frozenset(
    {"set-cookie", "openai-organization", "openai-project", "anthropic-organization-id"}
)
_SECRET_QUERY = re.compile(r"(key|token|secret|signature|password|sig)$", re.IGNORECASE)


def redact_url(url: str) -> str:
    """The URL with key-like query parameters (`api_key`, `key`, `token`, `sig`, …) redacted."""
    parts = urlsplit(url)
    if not parts.query:
        return url
    query = [
        (name, REDACTED if _SECRET_QUERY.search(name.replace("-", "_")) else value)
        for name, value in parse_qsl(parts.query, keep_blank_values=True)
    ]
    return urlunsplit(parts._replace(query=urlencode(query, safe="[]")))


def cap_text(text: str | None, limit: int) -> str | None:
    """`text` cut to `limit` characters, with a marker saying how much was dropped."""
    if text is None or len(text) <= limit:
        return text
    return text[:limit] + f"…[workbench: {len(text) - limit} more characters cut]"
