"""Secrets out before anything is written: the ONE rule set. The recorder, the span processor, the
cassette scrubber and `cassettes check` all ask these functions, so the checker finds exactly what
the recorder would have scrubbed.

- Headers and query parameters are secret by NAME: any name with a word that carries a credential
  (auth, token, key, secret, password, cookie, session, signature, credential, jwt, bearer, an
  organization or project id; `code` for query parameters, the OAuth code), whole or glued into
  another (`apikeyvalue`, `JSESSIONID`). Their values go. Everyday words that merely hold one
  (`author`, `tokenizer`, `sessions`, `monkey`) and names of a figure (`token_count`,
  `x-session-count`) are kept: their values are data a replay matches on.
- URL user-info (`https://user:pass@host`) goes whole.
- Bodies and free text are secret by SHAPE: the key formats of the LLM providers (OpenAI, Anthropic,
  OpenRouter, Groq, xAI, Hugging Face, Google), AWS, GitHub, Slack, Stripe, JWTs, bearer tokens
  and private key blocks are masked wherever they appear (a key pasted into a prompt), glued to a
  word too (`OPENAI_API_KEYsk-…`, `prod-sk-proj-…`) when it starts as only keys do or looks random;
  words and ids that hold a shape's start (`task-…`, `desk-<hex>`) and base64 blobs stay whole.
- What a request sent as a credential (a header's or query parameter's value, after a space or a tab;
  the user and password a Basic header or the URL's user-info carries) is masked wherever it comes
  back, whatever its shape: a provider echoing the key in its 401 body.
- A URL's path and fragment are text like a body's: a key put where a deployment name goes is masked.
- A stream spells its text a few characters per event: a secret no event holds whole, which its events'
  deltas spell together, is masked in the events that hold its pieces.
"""

from __future__ import annotations

import base64
import functools
import json
import re
from collections.abc import Iterable, Mapping
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

import orjson

REDACTED = "[redacted]"
# user-info as it stands in a URL once redacted ("[" and "]" are not allowed there unescaped)
REDACTED_USERINFO = "%5Bredacted%5D"

# words of a header or query-parameter name that mark its value as a credential
_CREDENTIAL_WORDS = frozenset({
    "auth", "authn", "authz", "authorization", "token", "key", "apikey", "secret", "password", "passwd", "pwd",
    "pass", "passcode", "passphrase", "cookie", "session", "sessionid", "sid", "signature", "sig", "hmac",
    "credential", "credentials", "jwt", "bearer", "assertion", "saml", "ticket", "csrf", "xsrf",
    "organization", "org", "project", "otp",
})
# concatenated names ("apikey", "accesstoken", "xsessiontoken"): these endings and beginnings
_CREDENTIAL_END = re.compile(
    r"(key|token|secret|signature|sig|password|passwd|pwd|auth|jwt|bearer|credentials?|cookie|session|sessid)$"
)
_CREDENTIAL_START = ("auth", "secret", "token", "session", "passw", "credential", "bearer", "jwt", "cookie", "saml")
# ... and these anywhere in them ("apikeyvalue", "JSESSIONID", "clientsecretvalue"): no other word holds them
_CREDENTIAL_INSIDE = re.compile(
    "apikey|secret|passw|passcode|credential|sessionid|sessid|accesstoken|authtoken|refreshtoken|accesskey|privatekey")
# everyday words those endings, beginnings and insides would take for credentials (`?author=`,
# `tokenizer`, `sessions`, `monkey`); a credential word beside them still counts (`x-author-token`)
_EVERYDAY_WORDS = frozenset({
    "author", "authors", "authored", "authoring", "authorship", "authority", "authorities", "authoritative",
    "tokens", "tokenize", "tokenized", "tokenizer", "tokenizers", "tokenization", "sessions",
    "secretary", "secretaries", "secretariat", "monkey", "donkey", "turkey", "whiskey", "hockey", "jockey",
    "hotkey", "turnkey",
})
# a name ending in one of these holds a figure about credentials, not one (`token_count`, `x-session-count`)
_FIGURE_WORDS = frozenset({"count", "counts", "limit", "limits", "remaining", "total", "length", "size", "max",
                           "min", "ttl", "timeout", "duration", "lifetime"})
# a credential word right after one of these words names no credential: a page cursor (`pageToken`,
# `next_token`, `continuation-token`: masked, the requests for every page of a listing look alike), a code
# of a kind (`language_code`, `country_code`)
_NOT_CREDENTIAL_AFTER = {
    "token": frozenset({"page", "next", "continuation", "pagination", "starting", "checkpoint", "cursor", "sync"}),
    "code": frozenset({"language", "lang", "locale", "country", "region", "area", "postal", "zip", "currency",
                       "status", "error", "response", "exit", "http"}),
}
# standard names the words misread: CORS's flag (its value is `true`), OAuth's proof of possession
# (`DPoP`: camelCase splits it as `DPo-P`)
_STANDARD_NAMES = {"access-control-allow-credentials": False, "dpop": True}
# query parameters only: an OAuth authorization code travels as `code`, PKCE's and OAuth 1's
# verifiers as `code_verifier`, `oauth_verifier`
_QUERY_ONLY_WORDS = frozenset({"code", "verifier"})
_WORD_SPLIT = re.compile(r"[^a-z0-9]+")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def _words(name: str) -> list[str]:
    return [word for word in _WORD_SPLIT.split(_CAMEL.sub("-", name).lower()) if word]


def _credential_name(name: str, extra: frozenset[str] = frozenset()) -> bool:
    standard = _STANDARD_NAMES.get(name.lower())
    if standard is not None:
        return standard
    words = _words(name)
    if len(words) > 1 and words[-1] in _FIGURE_WORDS:
        return False
    glued = []  # the words the glued rules read: not the everyday ones, nor a cursor's `token`
    for before, word in zip(("", *words), words):
        if before in _NOT_CREDENTIAL_AFTER.get(word, ()):
            continue
        if word in _CREDENTIAL_WORDS or word in extra:
            return True
        if word not in _EVERYDAY_WORDS:
            glued.append(word)
    compact = "".join(glued)
    return (bool(_CREDENTIAL_END.search(compact)) or compact.startswith(_CREDENTIAL_START)
            or _CREDENTIAL_INSIDE.search(compact) is not None)


@functools.lru_cache(maxsize=4096)  # a pure function of a name, and names repeat on every call and recording
def is_secret_header(name: str) -> bool:
    """Whether a request or response header carries a credential, a cookie, an organization or a
    project id (`Authorization`, `x-api-key`, `OpenAI-Organization`, `X-Custom-Auth-Token`, …)."""
    return _credential_name(name)


def is_secret_query(name: str) -> bool:
    """Whether a query parameter carries a credential (`key`, `api_key`, `auth`, `jwt`, `pwd`,
    `code`, `session`, `X-Amz-Credential`, `X-Amz-Signature`, …)."""
    return _credential_name(name, _QUERY_ONLY_WORDS)


def redact_url(url: str) -> str:
    """The URL without user-info, with every credential-like query parameter's value redacted and
    secret-shaped values in its path and fragment masked (a key put where a deployment name goes)."""
    if "@" not in url and "?" not in url and "#" not in url and _ANY_START.search(url.lower()) is None:
        return url
    try:
        parts = urlsplit(url)
    except ValueError:
        return REDACTED  # not a URL we can take apart: keep nothing of it
    netloc = parts.netloc
    if "@" in netloc:
        netloc = REDACTED_USERINFO + "@" + netloc.rpartition("@")[2]
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        if any(is_secret_query(name) for name, _ in pairs):
            query = urlencode([(name, REDACTED if is_secret_query(name) else value) for name, value in pairs],
                              safe="[]")
    path, fragment = mask_secrets(parts.path), mask_secrets(parts.fragment)
    if netloc == parts.netloc and query == parts.query and path == parts.path and fragment == parts.fragment:
        return url
    return urlunsplit(parts._replace(netloc=netloc, query=query, path=path, fragment=fragment))


def url_secrets(url: str) -> list[str]:
    """What `redact_url` takes out of `url`, by kind: `user-info`, `query parameter NAME`, `path: KIND`."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return ["unparseable URL"]
    found = []
    userinfo = parts.netloc.rpartition("@")[0] if "@" in parts.netloc else None
    if userinfo is not None and userinfo not in (REDACTED_USERINFO, REDACTED):
        found.append("user-info")
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if is_secret_query(name) and value not in ("", REDACTED):
            found.append(f"query parameter {name}")
    found += [f"path: {kind}" for kind in find_secrets(parts.path)]
    found += [f"fragment: {kind}" for kind in find_secrets(parts.fragment)]
    return found


# -- secrets by shape ------------------------------------------------------------------------------

# kind -> (where a match starts: lowercase literals, the pattern matched from there, what a match glued
# to a word may start with). A literal right after a word character (`[A-Za-z0-9_-]`, not an escape's
# `\n` or `%20`) is glued: `OPENAI_API_KEYsk-…`, `prod-sk-proj-…`, `tokenghp_…`, but also `task-`,
# `desk-`, `accession=`. A glued match is a secret when it starts with one of its shape's distinctive
# prefixes (`""`: any start; `sk-proj-`, `github_pat_`, `AKIA`: ones no prose or identifier holds), or
# when its value looks random (`_random`) and does not sit inside a base64 blob (an image, an encrypted
# reasoning item: random characters on both sides of it).
# Matching only where a literal occurs keeps a clean 2 KB body at tens of microseconds: Python's regex
# engine scans a leading alternation or look-behind at every position (hundreds of microseconds per pattern).
_SHAPES: dict[str, tuple[tuple[str, ...], str, tuple[str, ...]]] = {
    "Anthropic key": (("sk-ant-",), r"sk-ant-[A-Za-z0-9_\-]{16,}",
                      ("sk-ant-api", "sk-ant-admin", "sk-ant-oat", "sk-ant-sid")),
    "API key (sk-…: OpenAI, OpenRouter, DeepSeek, …)": (
        ("sk-",), r"sk-(?!ant-)[A-Za-z0-9_\-]{20,}", ("sk-proj-", "sk-svcacct-", "sk-admin-", "sk-or-v1-", "sk-none-")),
    "Groq key": (("gsk_",), r"gsk_[A-Za-z0-9]{30,}", ()),
    "xAI key": (("xai-",), r"xai-[A-Za-z0-9]{40,}", ()),
    "Hugging Face token": (("hf_",), r"hf_[A-Za-z0-9]{30,}", ()),
    "Google API key": (("aiza",), r"AIza[0-9A-Za-z_\-]{35}", ()),
    "Google OAuth token": (("ya29.",), r"ya29\.[0-9A-Za-z_\-]{20,}", ("ya29.",)),
    "AWS access key id": (("akia", "asia", "abia", "acca", "a3t"),
                          r"(?:AKIA|ASIA|ABIA|ACCA|A3T[A-Z0-9])[A-Z0-9]{16}(?![A-Z0-9])", ("akia", "asia")),
    "AWS secret access key": (("aws",),
                              r"(?i:aws.{0,24}?(?:secret|private).{0,24}?)[\"'=:\s]+([A-Za-z0-9/+]{40})(?![A-Za-z0-9/+])",
                              ("",)),
    "GitHub token": (("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
                     r"gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,}", ("github_pat_",)),
    "GitLab token": (("glpat-",), r"glpat-[A-Za-z0-9_\-]{20,}", ("glpat-",)),
    # bot, user, app, client, refresh, session and configuration tokens, the `d` cookie's value (URL-encoded);
    # `xoxo-` only in the legacy shape (team, user, token numbers, a hex tail): prose signs off with it
    "Slack token": (("xox",), r"xox[abceprs]-[0-9A-Za-z\-]{10,}|xoxd-[0-9A-Za-z%/+=\-]{10,}"
                              r"|xoxo-\d{4,}-\d{4,}-\d{4,}-[0-9a-fA-F]{6,}", ()),
    "Stripe key": (("sk_live_", "rk_live_", "sk_test_", "rk_test_"),
                   r"[sr]k_(?:live|test)_[0-9A-Za-z]{16,}", ()),
    "JSON web token": (("eyj",), r"eyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}", ("eyj",)),
    "private key": (("-----begin ",),
                    r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"
                    r"(?:[\s\S]{0,16384}?-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|[\s\S]{0,4096})", ("",)),
    # the token after "Bearer" (with a digit in it: prose says "bearer" too)
    "bearer token": (("bearer",),
                     r"(?i:bearer)\s+(?!\[redacted\])(?=[A-Za-z._~+/\-]*[0-9])([A-Za-z0-9._~+/\-]{12,}=*)", ()),
    "organization id": (("org-",), r"org-[A-Za-z0-9]{16,}\b", ()),
    "project id": (("proj_",), r"proj_[A-Za-z0-9]{16,}\b", ()),
    # glued names: JSESSIONID, ASP.NET_SessionId; PHPSESSID, `laravel_session=` by their random values. A
    # value is cookie-octets (RFC 6265: no comma) and no parenthesis: `f(session=x)` ends where code does
    "session cookie": (("session", "sid=", "__cf_bm=", "_cfuvid="),
                       r"(?i:__cf_bm|_cfuvid|session(?:id)?|sid)=(?!\[redacted\])([^;,()\s\"'&]{8,})", ("sessionid=",)),
}
# a keyword argument in code (`session=agent.session,`, `sid=self._cache[1])`): a name, attribute or index
# that a comma or parenthesis ends; a cookie's value there is random (a Flask cookie before a comma, in prose)
_CODE_VALUE = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*|\[\w*\])*")
# compiled at their literal's first hit, not at import: a clean body never reaches them, and the twenty
# compiles were 12 M instructions of every process that records (0.2% of a 100-test pytest session)
_COMPILED: dict[str, re.Pattern[str]] = {}
# the shortest credential value masked by its literal value wherever it reappears
MIN_ECHOED_SECRET = 8
_WORDISH = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
# a base64 blob (an image, an encrypted reasoning item) is made of these
_BLOB_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/_-")
_BLOB_BEFORE = re.compile(r"[A-Za-z0-9+/_\-]*\Z")  # the blob characters right before a position
_DIGITS, _UPPER = frozenset("0123456789"), frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZ")
_LOWER = frozenset("abcdefghijklmnopqrstuvwxyz")


def _random(value: str, digit: bool = True) -> bool:
    """Whether `value` reads as generated, not written: at least 16 letters and digits (a digit among
    them, unless `digit` is false) and the class (digit, upper, lower) changing at a quarter of them or
    more. A base62 key of 20 changes at about 12 of them, a hex one of 32 at 15;
    `assessment-v2-final-draft-2024` at 2, `OPENAI_API_KEY` at none."""
    classes = [0 if char in _DIGITS else 1 if char in _UPPER else 2 for char in value[:96]
               if char in _DIGITS or char in _UPPER or char in _LOWER]
    if len(classes) < 16 or (digit and 0 not in classes):
        return False
    return sum(one != other for one, other in zip(classes, classes[1:])) >= max(4, len(classes) // 4)


def _glued_secret(lowered: str, text: str, position: int, match: re.Match[str], distinctive: tuple[str, ...]) -> bool:
    """Whether a match whose literal is glued to a word is a secret (see `_SHAPES`)."""
    if lowered.startswith(distinctive, position):
        return True
    value = match.group(match.lastindex or 0)
    # glued to a lowercase vowel it ends an English word (task-, desk-, risk-, kiosk-): an id after it
    # (task-<uuid>, desk-<hex>) is no key unless it mixes cases as a base62 key does
    if not _random(value) or (text[position - 1] in "aeiou" and not (_UPPER & set(value) and _LOWER & set(value))):
        return False
    # inside a blob: it runs on past the match, the match is longer than any key, or the word before
    # it is long or random itself
    end = match.end()
    if (end < len(text) and text[end] in _BLOB_CHARS) or end - position > 256:
        return False
    before = _BLOB_BEFORE.search(text, max(0, position - 48), position).group()
    return len(before) < 40 and not _random(before, digit=False)


def _code_argument(text: str, match: re.Match[str]) -> bool:
    """Whether a session-cookie match is a keyword argument in code (see `_CODE_VALUE`)."""
    value = match.group(1)
    return (text[match.end():match.end() + 1] in (",", ")") and _CODE_VALUE.fullmatch(value) is not None
            and not _random(value))


# one scan for every literal at once: cheaper than a `find` per literal on a short text (a span's
# attributes: a model name, an operation), dearer on a long one (the alternation is tried at every position)
_ANY_START = re.compile("|".join(re.escape(start) for starts, _, _ in _SHAPES.values() for start in starts))
_SHORT_TEXT = 512


def _matches(text: str) -> list[tuple[str, re.Match[str]]]:
    """Every secret-shaped value in `text`, in order, none overlapping another."""
    lowered = text.lower()
    if len(lowered) != len(text):  # a character whose lower case is longer: keep positions aligned
        lowered = "".join(char if len(char.lower()) != 1 else char.lower() for char in text)
    if len(lowered) <= _SHORT_TEXT and _ANY_START.search(lowered) is None:
        return []
    found: list[tuple[str, re.Match[str]]] = []
    for kind, (starts, pattern, distinctive) in _SHAPES.items():
        for start in starts:
            position = lowered.find(start)
            while position >= 0:
                compiled = _COMPILED.get(kind)
                if compiled is None:  # two threads may both compile it: the same pattern either way
                    compiled = _COMPILED[kind] = re.compile(pattern)
                match = compiled.match(text, position)
                if match is not None and kind == "session cookie" and _code_argument(text, match):
                    match = None
                # after an escape (a JSON body's `\nsk-…`, a URL's `%20sk-…`) the literal starts a word
                if match is not None and (not position or text[position - 1] not in _WORDISH
                                          or text[position - 2:position - 1] == "\\"
                                          or text[position - 3:position - 2] == "%"
                                          or _glued_secret(lowered, text, position, match, distinctive)):
                    found.append((kind, match))
                else:
                    match = None
                position = lowered.find(start, match.end() if match is not None else position + 1)
    found.sort(key=lambda item: (item[1].start(), -item[1].end()))
    kept: list[tuple[str, re.Match[str]]] = []
    for kind, match in found:
        if not kept or match.start() >= kept[-1][1].end():
            kept.append((kind, match))
    return kept


def mask_secrets(text: str | None, known: Iterable[str] = ()) -> str | None:
    """`text` with every secret-shaped value, and every `known` credential value, replaced by
    `[redacted]`. Cheap when there is nothing to mask."""
    if not text:
        return text
    for value in known:
        if len(value) >= MIN_ECHOED_SECRET and value in text:
            text = text.replace(value, REDACTED)
    matches = _matches(text)
    if not matches:
        return text
    pieces, last = [], 0
    for _, match in matches:
        start, end = match.span(1) if match.lastindex else match.span()
        pieces += [text[last:start], REDACTED]
        last = end
    pieces.append(text[last:])
    return "".join(pieces)


# the string fields a streamed event carries a piece of its text in: OpenAI chat's `content`, `refusal`,
# reasoning and tool-call `arguments`; the Responses API's `delta`; Anthropic's `text`, `partial_json`, `thinking`
_DELTA_FIELDS = frozenset({"content", "text", "arguments", "partial_json", "thinking", "delta", "refusal",
                           "reasoning_content", "reasoning"})
# what tells one text of a stream from another beside a delta: its choice, content block, output item, tool call
_INDEX_FIELDS = ("index", "output_index", "content_index")


def _delta_pieces(value: dict, path: tuple, found: dict[tuple, list[list]], number: int) -> None:
    """Every delta string in one event, by the text it is a piece of: [line number, container, field, piece]."""
    for name in _INDEX_FIELDS:
        if name in value:
            path = (*path, value[name])
    for name, item in value.items():
        kind = type(item)
        if kind is str:
            if item and name in _DELTA_FIELDS:
                found.setdefault((*path, name), []).append([number, value, name, item])
        elif kind is dict:
            _delta_pieces(item, (*path, name), found, number)
        elif kind is list:
            for element in item:
                if type(element) is dict:
                    _delta_pieces(element, (*path, name), found, number)


_PIECE = re.compile(r'"(' + "|".join(sorted(_DELTA_FIELDS)) + r')"\s*:\s*"([^"\\]*(?:\\.[^"\\]*)*)"')
_INDEX = re.compile(r'index"\s*:\s*(\d+)')  # every one of _INDEX_FIELDS ends so: a literal prefix, the fast search


def _clean_single_text(text: str, known: list[str]) -> bool:
    """Whether `text` is a stream of one text (one delta field, one index: a plain answer) that spells
    no shape's literal and no known value: two regex scans of the raw text instead of a JSON parse an
    event (a clean 300-event answer costs a fifth as much). Any other stream is read exactly."""
    pieces = _PIECE.findall(text)
    if len({name for name, _ in pieces}) > 1 or len(set(_INDEX.findall(text))) > 1:
        return False
    joined = "".join(json.loads(f'"{piece}"') if "\\" in piece else piece for _, piece in pieces)
    return _ANY_START.search(joined.lower()) is None and not any(value in joined for value in known)


def _split_secrets(text: str, known: Iterable[str]) -> tuple[list[str], str]:
    """The kinds of the secrets a stream's deltas spell only together, and `text` with them masked."""
    if not text[:64].lstrip().startswith(("data:", "event:", ":")):
        return [], text
    known = [value for value in known if len(value) >= MIN_ECHOED_SECRET]
    if _clean_single_text(text, known):
        return [], text
    lines = text.split("\n")
    events: dict[int, dict] = {}
    texts: dict[tuple, list[list]] = {}  # each text of the stream: [line number, container, field, piece]
    for number, line in enumerate(lines):
        if line.startswith("data:") and "{" in line:
            try:
                event = events[number] = orjson.loads(line[5:])
            except orjson.JSONDecodeError:
                continue  # a torn last event
            if type(event) is dict:
                _delta_pieces(event, (), texts, number)
    kinds: list[str] = []
    changed: set[int] = set()
    for found in texts.values():
        if len(found) < 2:
            continue  # one piece: the scan of the whole body saw it whole
        joined = "".join(piece for *_, piece in found)
        spans = [(match.span(1) if match.lastindex else match.span(), kind) for kind, match in _matches(joined)]
        for value in known:
            start = joined.find(value)
            while start >= 0:
                spans.append(((start, start + len(value)), "a credential the request sent"))
                start = joined.find(value, start + len(value))
        if not spans:
            continue
        kinds += [kind for _, kind in spans]
        hidden, starts = bytearray(len(joined)), set()
        for (start, end), _ in spans:
            starts.add(start)
            hidden[start:end] = b"\1" * (end - start)
        offset = 0
        for number, container, name, piece in found:
            kept = [(REDACTED if position in starts else "") + ("" if hidden[position] else char)
                    for position, char in enumerate(piece, offset)]
            offset += len(piece)
            if any(hidden[offset - len(piece):offset]):
                container[name] = "".join(kept)
                changed.add(number)
    for number in changed:
        ending = "\r" if lines[number].endswith("\r") else ""
        lines[number] = "data: " + json.dumps(events[number], ensure_ascii=False, separators=(",", ":")) + ending
    return list(dict.fromkeys(kinds)), "\n".join(lines) if changed else text


def mask_stream_secrets(text: str | None, known: Iterable[str] = ()) -> str | None:
    """`text`, a server-sent event stream already through `mask_secrets`, with every secret its events'
    deltas spell only together masked too (a key the model streams back, a few characters an event):
    `[redacted]` in the event where it starts, its characters gone from every event that held one."""
    return _split_secrets(text, known)[1] if text else text


def find_stream_secrets(text: str | None, known: Iterable[str] = ()) -> list[str]:
    """The kinds of the secrets `mask_stream_secrets` would mask in `text`."""
    return _split_secrets(text, known)[0] if text else []


def find_secrets(text: str | None) -> list[str]:
    """The kinds of secret-shaped values in `text` (exactly what `mask_secrets` would mask)."""
    if not text:
        return []
    return list(dict.fromkeys(kind for kind, _ in _matches(text)))


# the whitespace between an Authorization scheme and its credentials: a space, or a tab
_SCHEME = re.compile(r"\s+")


def _basic_credentials(encoded: str) -> list[str]:
    """The user and password of a Basic credential, as its server decodes them."""
    try:
        decoded = base64.b64decode(encoded, validate=True).decode("latin-1")
    except ValueError:
        return []
    return [piece for piece in decoded.partition(":")[0::2] if piece]


def credential_values(headers: Mapping[str, str] | Iterable[tuple[str, str]], url: str = "") -> list[str]:
    """The values a request sent as credentials (secret headers, secret query parameters, URL
    user-info), so the same values can be masked where a response echoes them."""
    values: list[str] = []
    items = headers.items() if isinstance(headers, Mapping) else headers
    for name, value in items:
        if not is_secret_header(name) or not value:
            continue
        for part in re.split(r"[;,]", value):  # a cookie header: each value
            part = part.strip()
            part = part.partition("=")[2] if "=" in part and name.lower() in ("cookie", "set-cookie") else part
            scheme, rest = (_SCHEME.split(part, maxsplit=1) + [""])[:2]
            values.append(rest if rest and scheme.lower() in ("bearer", "basic", "token") else part)
            if rest and scheme.lower() == "basic":  # a provider echoes the password it decoded
                values += _basic_credentials(rest)
    if url:
        try:
            parts = urlsplit(url)
        except ValueError:
            return values
        if "@" in parts.netloc:
            userinfo = parts.netloc.rpartition("@")[0]
            values += [unquote(piece) for piece in userinfo.split(":") if piece]
        values += [value for name, value in parse_qsl(parts.query, keep_blank_values=True) if is_secret_query(name)]
    kept = {value for value in values if len(value) >= MIN_ECHOED_SECRET and REDACTED not in value
            and REDACTED_USERINFO not in value}
    return sorted(kept, key=len, reverse=True)


CUT_MARKER = "…[workbench: "  # starts what a body cut at the cap ends with


def cap_text(text: str | None, limit: int) -> str | None:
    """`text` cut to `limit` characters, with a marker saying how much was dropped."""
    if text is None or len(text) <= limit:
        return text
    return text[:limit] + f"{CUT_MARKER}{len(text) - limit} more characters cut]"
