"""Secrets out of a cassette before it is written, and a detector for what slipped in anyway.

Scrubbed by default: request headers `authorization`, `x-api-key`, `api-key`, cookies; response
headers `set-cookie`, `openai-organization`, `openai-project`, `anthropic-organization-id`;
key-like query parameters. Bodies are stored decoded. A user hook may rewrite bodies (PII); the
same hook runs over live requests before they are matched, so a scrubbed cassette still matches."""

from __future__ import annotations

import re
from collections.abc import Callable

from workbench.replay.cassette import Interaction, RecordedRequest, RecordedResponse
from workbench.wire.decode import decode_body
from workbench.wire.redact import SECRET_REQUEST_HEADERS, SECRET_RESPONSE_HEADERS, redact_url

BodyHook = Callable[[str], str]

# headers that describe the stored bytes, which are stored decoded
_ENCODING_HEADERS = {"content-encoding", "content-length", "transfer-encoding"}

SECRET_PATTERNS: dict[str, re.Pattern[str]] = {
    "api key (sk-…)": re.compile(r"\bsk-(?:ant-|proj-|or-)?[A-Za-z0-9_\-]{16,}"),
    "bearer token": re.compile(r"\bBearer\s+(?!\[redacted\])[A-Za-z0-9._~+/\-]{12,}=*", re.IGNORECASE),
    "AWS access key": re.compile(r"\bAKIA[0-9A-Z]{16}\b"),
    "Google API key": re.compile(r"\bAIza[0-9A-Za-z_\-]{35}\b"),
    "organization id": re.compile(r"\borg-[A-Za-z0-9]{16,}\b"),
    "project id": re.compile(r"\bproj_[A-Za-z0-9]{16,}\b"),
    "cookie": re.compile(r"\b(?:__cf_bm|_cfuvid|session(?:id)?)=[^;\s\"']{8,}", re.IGNORECASE),
}
_SECRET_HEADERS = SECRET_REQUEST_HEADERS | SECRET_RESPONSE_HEADERS


def _keep(headers: dict[str, list[str]], secret: frozenset[str]) -> dict[str, list[str]]:
    return {
        name: values
        for name, values in headers.items()
        if name.lower() not in secret and name.lower() not in _ENCODING_HEADERS
    }


def _clean(interaction: Interaction) -> bool:
    """Nothing to scrub: no secret or encoding header, no query string, no gzip-looking body (the
    case of every cassette Workbench wrote, checked in a fraction of the cost of rebuilding it)."""
    request, response = interaction.request, interaction.response
    if "?" in request.uri or request.body[:2] == b"\x1f\x8b" or response.body[:2] == b"\x1f\x8b":
        return False
    for headers, secret in ((request.headers, SECRET_REQUEST_HEADERS), (response.headers, SECRET_RESPONSE_HEADERS)):
        for name in headers:
            lowered = name.lower()
            if lowered in secret or lowered in _ENCODING_HEADERS:
                return False
    return True


def scrub(interaction: Interaction, body_hook: BodyHook | None = None) -> Interaction:
    if body_hook is None and _clean(interaction):
        return interaction
    request, response = interaction.request, interaction.response
    request_encoding = ", ".join(request.headers.get("content-encoding", request.headers.get("Content-Encoding", [])))
    response_encoding = ", ".join(
        response.headers.get("content-encoding", response.headers.get("Content-Encoding", []))
    )
    request_body = decode_body(request.body, request_encoding)
    response_body = decode_body(response.body, response_encoding)
    if body_hook is not None:
        request_body = scrub_body(request_body, body_hook)
        response_body = scrub_body(response_body, body_hook)
    return Interaction(
        request=RecordedRequest(
            method=request.method, uri=redact_url(request.uri),
            headers=_keep(request.headers, SECRET_REQUEST_HEADERS), body=request_body,
        ),
        response=RecordedResponse(
            status=response.status, reason=response.reason,
            headers=_keep(response.headers, SECRET_RESPONSE_HEADERS), body=response_body,
        ),
    )


def scrub_body(body: bytes, body_hook: BodyHook | None) -> bytes:
    if body_hook is None or not body:
        return body
    return body_hook(body.decode("utf-8", "replace")).encode("utf-8")


def find_secrets(interaction: Interaction) -> list[str]:
    """What looks like a secret in a recorded interaction: `where: kind` for each finding."""
    findings = []
    for side, message in (("request", interaction.request), ("response", interaction.response)):
        for name, values in message.headers.items():
            if name.lower() in _SECRET_HEADERS and any(value not in ("", "[redacted]") for value in values):
                findings.append(f"{side} header {name}")
        texts = {"body": message.body.decode("utf-8", "replace"), "headers": repr(message.headers)}
        if side == "request":
            texts["uri"] = interaction.request.uri
        for where, text in texts.items():
            for kind, pattern in SECRET_PATTERNS.items():
                if pattern.search(text):
                    findings.append(f"{side} {where}: {kind}")
    return findings
