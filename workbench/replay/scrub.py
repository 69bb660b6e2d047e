"""Secrets out of a cassette before it is written, and a detector for what slipped in anyway: both
ask the one rule set in `workbench.wire.redact`, so `cassettes check` finds exactly what scrubbing
removes. Scrubbed: every credential-carrying header (by name, both sides), URL user-info and
credential-like query parameters, secret-shaped values in bodies and header values (a stream's too
when its events spell one only together), and whatever a request sent as a credential wherever the
response echoes it. Bodies are stored decoded. A user hook
may rewrite bodies (PII); the same hook runs over live requests before they are matched, so a
scrubbed cassette still matches."""

from __future__ import annotations

from collections.abc import Callable

from workbench.replay.cassette import Interaction, RecordedRequest, RecordedResponse
from workbench.wire.decode import NOT_DECODED, TOO_BIG, decode_body, looks_compressed
from workbench.wire.redact import (
    REDACTED, credential_values, find_secrets as find_in_text, find_stream_secrets, is_secret_header, mask_secrets,
    mask_stream_secrets, redact_url, url_secrets,
)

BodyHook = Callable[[str], str]
# compressed bodies no scan can read, by the marker scrubbing stores in their place
_UNREAD = {TOO_BIG: "over 64 MB once decompressed", NOT_DECODED: "zstd that could not be decompressed"}

# headers that describe the stored bytes, which are stored decoded
_ENCODING_HEADERS = {"content-encoding", "content-length", "transfer-encoding"}


def _keep(headers: dict[str, list[str]], known: list[str]) -> dict[str, list[str]]:
    return {
        name: [mask_secrets(value, known) for value in values]
        for name, values in headers.items()
        if not is_secret_header(name) and name.lower() not in _ENCODING_HEADERS
    }


def _clean(interaction: Interaction) -> bool:
    """Nothing to scrub: no credential or encoding header, nothing to redact in the URI, no
    compressed-looking body (the case of every cassette Workbench wrote, checked in a fraction of the cost
    of rebuilding it). Live recordings always carry a content-length, so they are always scrubbed."""
    request, response = interaction.request, interaction.response
    if redact_url(request.uri) != request.uri or looks_compressed(request.body) or looks_compressed(response.body):
        return False
    for headers in (request.headers, response.headers):
        for name in headers:
            if is_secret_header(name) or name.lower() in _ENCODING_HEADERS:
                return False
    return True


def _flat(headers: dict[str, list[str]]) -> list[tuple[str, str]]:
    return [(name, value) for name, values in headers.items() for value in values]


def scrub(interaction: Interaction, body_hook: BodyHook | None = None) -> Interaction:
    if body_hook is None and _clean(interaction):
        return interaction
    request, response = interaction.request, interaction.response
    known = credential_values(_flat(request.headers) + _flat(response.headers), request.uri)
    request_body = _masked_body(_decoded(request), known)
    response_body = _masked_body(_decoded(response), known)
    if body_hook is not None:
        request_body = scrub_body(request_body, body_hook)
        response_body = scrub_body(response_body, body_hook)
    return Interaction(
        request=RecordedRequest(
            method=request.method, uri=redact_url(request.uri), headers=_keep(request.headers, known), body=request_body,
        ),
        response=RecordedResponse(
            status=response.status, reason=response.reason, headers=_keep(response.headers, known), body=response_body,
        ),
    )


def _decoded(message: RecordedRequest | RecordedResponse) -> bytes:
    headers = message.headers
    return decode_body(message.body, ", ".join(headers.get("content-encoding", headers.get("Content-Encoding", []))))


def _masked_body(body: bytes, known: list[str]) -> bytes:
    try:
        text, encoding = body.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:  # binary (a file upload): latin-1 reads every byte, so the rest round-trips
        text, encoding = body.decode("latin-1"), "latin-1"
    masked = mask_stream_secrets(mask_secrets(text, known), known)
    return body if masked is text else masked.encode(encoding)


def masked_request_body(body: bytes) -> bytes:
    """A live request body as scrubbing stores it (secret-shaped values masked): a request with a
    key pasted into its prompt still finds its recording."""
    return _masked_body(body, [])


def scrub_body(body: bytes, body_hook: BodyHook | None) -> bytes:
    if body_hook is None or not body:
        return body
    return body_hook(body.decode("utf-8", "replace")).encode("utf-8")


def find_secrets(interaction: Interaction) -> list[str]:
    """What scrubbing would remove from a recorded interaction: `where: kind` for each finding."""
    findings = []
    request, response = interaction.request, interaction.response
    known = credential_values(_flat(request.headers) + _flat(response.headers), request.uri)
    findings += [f"request uri: {kind}" for kind in url_secrets(request.uri)]
    for side, message in (("request", request), ("response", response)):
        for name, values in message.headers.items():
            kinds = [kind for value in values for kind in find_in_text(value)]
            if is_secret_header(name) and any(value not in ("", REDACTED) for value in values):
                findings.append(f"{side} header {name}" + (f" ({', '.join(kinds)})" if kinds else ""))
            elif not is_secret_header(name):
                findings += [f"{side} header {name}: {kind}" for kind in kinds]
                if any(sent in value for value in values for sent in known):
                    findings.append(f"{side} header {name}: a credential the request sent")
        decoded = _decoded(message)
        if decoded in _UNREAD and message.body != decoded:  # scrubbing keeps the marker instead
            findings.append(f"{side} body: {_UNREAD[decoded]} (not scanned: scrubbing keeps a marker instead)")
        body = decoded.decode("latin-1")  # every byte a character: a key in a binary upload is read whole
        findings += [f"{side} body: {kind}" for kind in find_in_text(body)]
        findings += [f"{side} body: {kind}, split across stream events"
                     for kind in find_stream_secrets(mask_secrets(body, known), known)]
        if any(value in body for value in known):
            findings.append(f"{side} body: a credential the request sent")
    return findings
