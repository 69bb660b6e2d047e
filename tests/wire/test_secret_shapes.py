"""Every secret shape of `workbench.wire.redact` masks a sample of its own, at a word's edge and glued
to a word (`OPENAI_API_KEYsk-…`, `prod-sk-proj-…`), while words and ids that hold a shape's literal
(`task-…`, `desk-…`, `possession=`) and base64 blobs stay whole. The patterns are compiled at their
literal's first hit, not at import, so a broken one would show only when a secret of its shape
arrives: each is made to mask one here. Keys are built from pieces: none stands whole in this file."""

from __future__ import annotations

import base64
import itertools
import json
import random
import uuid

import pytest

from workbench.wire import redact

SHAPE_SAMPLES = {
    "Anthropic key": "sk-ant-" + "a1" * 10,
    "API key (sk-…: OpenAI, OpenRouter, DeepSeek, …)": "sk-" + "b2" * 12,
    "Groq key": "gsk_" + "C3" * 16,
    "xAI key": "xai-" + "D4" * 21,
    "Hugging Face token": "hf_" + "E5" * 16,
    "Google API key": "AIza" + "F6" * 17 + "f",
    "Google OAuth token": "ya29." + "G7" * 11,
    "AWS access key id": "AKIA" + "H8" * 8,
    "AWS secret access key": 'aws_secret_access_key = "' + "I9" * 20 + '"',
    "GitHub token": "ghp_" + "J0" * 18,
    "GitLab token": "glpat-" + "K1" * 11,
    "Slack token": "xoxb-" + "1a2B" * 4,
    "Stripe key": "sk_live_" + "L2" * 9,
    "JSON web token": "eyJ" + "M3" * 5 + ".eyJ" + "N4" * 5 + "." + "O5" * 5,
    "private key": "-----BEGIN " + "PRIVATE KEY-----\nP6P6P6P6\n-----END PRIVATE KEY-----",
    "bearer token": "Bearer q7" + "Q7" * 8,
    "organization id": "org-" + "R8" * 9,
    "project id": "proj_" + "S9" * 9,
    "session cookie": "sessionid=" + "T0" * 5,
}


@pytest.mark.parametrize("kind", sorted(SHAPE_SAMPLES))
def test_every_secret_shape_masks_a_sample_of_its_own(kind):
    assert set(SHAPE_SAMPLES) == set(redact._SHAPES)  # a new shape needs its sample here
    sample = SHAPE_SAMPLES[kind]
    masked = redact.mask_secrets(f"here: {sample} (end)")
    assert "[redacted]" in masked and masked != f"here: {sample} (end)", (kind, masked)
    assert kind in redact._COMPILED


# a random-looking base62 tail, from pieces
TAIL = "Xq3vT7bN" + "w9LkZp2R" + "yF4hJ6sD" + "8gA1cV5m" + "Q0eU3iO7" + "tY9rW2nB"
HEX = "4f8e2a9c" + "7b1d3e5f" + "60a8b2c4" + "d6e8f0a1"


@pytest.mark.parametrize("kind", sorted(SHAPE_SAMPLES))
def test_every_secret_shape_glued_to_a_word_is_masked(kind):
    for word in ("KEY", "token", "env_", "prod-"):
        text = f"{word}{SHAPE_SAMPLES[kind]} (end)"
        assert redact.find_secrets(text) == [kind], (word, text)
        masked = redact.mask_secrets(text)
        assert masked.startswith(word) and "[redacted]" in masked and redact.find_secrets(masked) == [], masked


@pytest.mark.parametrize("text", [
    "k" + "sk-proj-" + TAIL, "env_sk-" + TAIL, "OPENAI_API_KEY" + "sk-" + TAIL, "x-api-key" + "sk-ant-api03-" + TAIL,
    "token" + "ghp_" + TAIL[:36], "prod-sk-proj-" + TAIL, "DEEPSEEK_API_KEY" + "sk-" + HEX, "token" + "sk-" + HEX,
    "task-" + "sk-or-v1-" + HEX + HEX, "GROQ_API_KEY" + "gsk_" + TAIL, "HF_TOKEN" + "hf_" + TAIL[:34],
    "key" + "AIza" + TAIL[:35], "AWS_ACCESS_KEY_ID" + "AKIA" + "Z7QX3LMN" + "5PQR8STV", "x_" + "github_pat_" + TAIL,
    "JSESSIONID=" + HEX.upper(), "PHPSESSID=" + "9d2a5b7k" + "q3v1m8n4" + "p6r0s2t4u6", "HWWAFSESID=" + HEX[:18],
    "laravel_session=" + TAIL, "\\nBearer " + TAIL[:30],
], ids=lambda text: text[:16])
def test_a_key_glued_to_a_word_is_masked(text):
    masked = redact.mask_secrets(f"'{text}'")
    assert masked.endswith("[redacted]'") and TAIL[8:24] not in masked and HEX[8:24] not in masked.lower(), masked


@pytest.mark.parametrize("text", [
    # after an escape (a JSON body's newline, a URL's %20) a key starts a word: masked whatever its tail
    '{"content": "my key:\\nsk-' + HEX + '"}', "q=%20sk-" + HEX, '{"content": "\\u0022sk-' + TAIL + '"}',
])
def test_a_key_after_an_escape_is_masked(text):
    assert "[redacted]" in redact.mask_secrets(text) and HEX not in redact.mask_secrets(text)


PROSE = [
    "task-management-system-overview", "risk-assessment-v2-final-draft-2024", "flask-ant-design-system-components",
    "desk-lamp-with-usb-charger-2024", "mask_test_configuration_sample", "task_test_sampleconfigurationxyz",
    "subtask-retry-count-3-of-12-attempts", "ask-the-user-for-permission-first", "multitask-learning-benchmark-v3",
    "the possession=ball-handling-2024 and accession=NM_000546", "obsession=collecting-stamps-since-1998",
    "a standard-bearer 2024-presidential-campaign", "cyborg-organization-of-america", "the_proj_configuration_file",
    "kiosk-" + uuid.UUID(int=7).hex, "task-" + str(uuid.UUID(int=2**127 + 12345)), "desk-" + HEX,
    "brisk-" + HEX + "-walk", "my_proj_abcdefghijklmnopq", "OPENAI_API_KEY=", "session=abc",
]


@pytest.mark.parametrize("text", PROSE)
def test_words_and_ids_that_hold_a_literal_are_kept(text):
    assert redact.mask_secrets(text) == text and redact.find_secrets(text) == []


# Slack's token kinds, in the shapes of gitleaks' and detect-secrets' samples (built from pieces)
SLACK_TOKENS = [
    "xoxb-" + "263594206564-" + "FGqddMF8t08v8N7Oq4i57vs1",  # bot, legacy bot
    "xoxb-" + "4614724432022-5152386766518-" + "O5WzjWGLG0wcCm2WPrjEmnys",  # bot
    "xoxp-" + "41684372915-1320496754-45609968301-" + HEX,  # user
    "xoxa-" + "2-511111111-31111111111-3111111111111-" + HEX[:18],  # workspace app
    "xoxr-" + TAIL[:16],  # refresh
    "xoxe-" + "1-" + TAIL * 3,  # rotating refresh
    "xoxe.xoxp-" + "1-" + TAIL * 3,  # configuration access
    "xoxs-" + "3206092076-3204538285-3743137121-" + HEX[:10],  # session (legacy)
    "xoxo-" + "523423-234243-234233-" + HEX[:18],  # legacy
    "xoxc-" + "1234567890-1234567890123-1234567890123-" + HEX + HEX,  # browser client
    "xoxd-" + "aBcD%2FeFgH1234%2BiJkL" + "%3D%3D",  # the client's `d` cookie, URL-encoded
]


@pytest.mark.parametrize("token", SLACK_TOKENS, ids=lambda token: token[:5])
def test_every_slack_token_kind_is_masked(token):
    masked = redact.mask_secrets(f"SLACK_TOKEN={token} (end)")
    assert redact.find_secrets(f"SLACK_TOKEN={token}") == ["Slack token"]
    assert token[10:] not in masked and masked.endswith("[redacted] (end)"), masked


@pytest.mark.parametrize("text", [
    "hugs xoxo-from Ann", "hugs and kisses, xoxo-from-ann-and-the-kids", "xoxo-gossip-girl-season-2-episode-4",
    "see you soon xoxo-Annabelle2024", "love, mum xoxo-xoxo-xoxo-xoxo", "xoxo-2024-12-25-christmas-card",
])
def test_xoxo_in_prose_is_kept(text):
    """`xoxo` signs off a letter: only the legacy token's numbered shape after it is a Slack token."""
    assert redact.mask_secrets(text) == text and redact.find_secrets(text) == []


# keyword arguments named like a cookie, in code a prompt or a log quotes: a name, attribute or index
@pytest.mark.parametrize("text", [
    "cache=cache, session=session, prompt_hash=h", "cache=agent.prompt_cache, session=agent.session, prompt_hash=x",
    "max_tokens=ceiling, session=self._cache[1],", "connect(sid=request.session_id)", "run(sessionid=self.current_id)",
])
def test_a_keyword_argument_named_session_is_kept(text):
    assert redact.mask_secrets(text) == text and redact.find_secrets(text) == []


# session cookies in the places they travel: a Cookie header, Set-Cookie attributes, a query string, a JSON
# string, prose; a comma after a random value (a Flask cookie) still leaves it a cookie
@pytest.mark.parametrize("text", [
    "Cookie: session=" + HEX + "; theme=dark", "Set-Cookie: sessionid=" + TAIL[:24] + "; Path=/; HttpOnly",
    "https://shop.example.test/cart?session=" + TAIL[:20] + "&page=2", '{"cookie": "sid=' + HEX[:16] + '"}',
    "my cookie was session=eyJ" + TAIL[:22] + "." + TAIL[22:30] + "." + HEX[:20] + ", then it expired",
    "connect.sid=s%3A" + TAIL[:24] + "." + HEX[:20] + ")", "__cf_bm=" + TAIL[:30] + "-1700000000-0-" + HEX[:12] + ",",
])
def test_a_session_cookie_is_masked_wherever_it_stands(text):
    masked = redact.mask_secrets(text)
    assert redact.find_secrets(text) == ["session cookie"] and "[redacted]" in masked, masked
    assert TAIL[8:16] not in masked and HEX[8:16] not in masked, masked


@pytest.mark.parametrize("alphabet", ["standard", "url-safe"])
def test_a_base64_blob_keeps_every_character(alphabet):
    """An image or an encrypted reasoning item holds `sk-`, `hf_`, `AIza` by chance, glued to random
    characters on both sides: no key. 1.6 MB of the url-safe alphabet (a seeded generator: the same
    bytes every run) holds ten such literals."""
    encode = base64.b64encode if alphabet == "standard" else base64.urlsafe_b64encode
    blob = encode(random.Random(3).randbytes(1_200_000)).decode()
    literals = sum(blob.count(literal) for literal in ("sk-", "hf_", "AIza", "org-", "ghp_", "xai-", "gsk_"))
    assert literals >= (5 if alphabet == "url-safe" else 0)
    text = '{"data": "' + blob + '"}'
    assert redact.mask_secrets(text) == text


@pytest.mark.parametrize("name", ["JSESSIONID", "apikeyvalue", "x-apikeyid", "myapikeyheader", "accesstokenvalue",
                                  "clientsecretvalue", "x-refreshtoken-v2", "userpasswordhash", "awsaccesskeyid"])
def test_a_credential_word_glued_inside_a_name_makes_it_secret(name):
    assert redact.is_secret_header(name) and redact.is_secret_query(name)
    url = redact.redact_url(f"https://api.example.test/v1?{name}=cnryGluedName42&page=2")
    assert "cnryGluedName42" not in url and "page=2" in url


@pytest.mark.parametrize("name", ["keyword", "keywords", "max_tokens", "x-request-id", "x-ratelimit-remaining-tokens",
                                  "anthropic-ratelimit-tokens-remaining", "openai-processing-ms", "page"])
def test_names_without_a_credential_word_are_kept(name):
    assert not redact.is_secret_header(name) and not redact.is_secret_query(name)


# the header and query names real credentials travel under: OAuth 2 and 1, PKCE, AWS SigV4 and SigV2,
# CloudFront, Azure (keys, SAS, Functions), Google, GCS, the LLM providers and gateways, GitLab, Vault,
# webhook signatures, CSRF tokens, session cookies, basic credentials
CREDENTIAL_NAMES = [
    "access_token", "id_token", "refresh_token", "client_secret", "client_assertion", "assertion", "subject_token",
    "oauth_token", "oauth_token_secret", "oauth_signature", "accessToken",
    "idToken", "refreshToken", "clientSecret", "X-Amz-Signature", "X-Amz-Credential", "X-Amz-Security-Token",
    "x-amz-security-token", "AWSAccessKeyId", "Signature", "Key-Pair-Id", "api-key", "sig", "Ocp-Apim-Subscription-Key",
    "x-functions-key", "key", "x-goog-api-key", "X-Goog-Signature", "X-Goog-Credential",
    "x-goog-iam-authorization-token",
    "apikey", "APIKEY", "api_key", "apiKey", "x-api-key", "X-API-KEY", "anthropic-api-key", "xi-api-key",
    "x-rapidapi-key", "x-portkey-api-key", "x-litellm-api-key", "helicone-auth", "api_token", "x-api-token",
    "cookie", "Cookie", "set-cookie", "sessionid", "session_id", "sessionId", "session", "x-session", "x-session-id",
    "x-session-token", "PHPSESSID", "JSESSIONID", "ASP.NET_SessionId", "connect.sid", "sid", "laravel_session",
    "auth", "authorization", "Authorization", "proxy-authorization", "x-auth-token", "X-Auth-Token", "auth_token",
    "authToken", "x-authn", "x-authz", "private-token", "PRIVATE-TOKEN", "x-vault-token", "x-access-token",
    "x-shopify-access-token", "cf-access-client-secret", "x-hasura-admin-secret", "secret", "signature",
    "x-hub-signature-256", "stripe-signature", "hmac", "x-csrf-token", "X-CSRFToken", "x-xsrf-token", "csrftoken",
    "csrf", "dpop", "DPoP", "SAMLResponse", "ticket", "jwt", "bearer", "token", "password", "passwd", "pwd", "pass",
    "passcode", "passkey", "passphrase", "user_password", "otp", "openai-organization", "OpenAI-Project",
    "anthropic-organization-id", "secret_key", "secretKey", "private_key", "AWSSecretAccessKey", "credential",
    "credentials", "sessionToken", "x-author-token", "tokenizer-key", "monkey-key", "secretary-password",
    "page_api_key", "next_access_token", "language_code_secret",
]
# everyday names that hold a credential word's letters, or name a figure about credentials
EVERYDAY_NAMES = [
    "author", "authors", "authority", "authored_by", "authorId", "author_name", "x-author", "authorship",
    "tokenizer", "tokenizers", "tokens", "max_tokens", "token_count", "tokens_used", "x-tokenizer-version",
    "session_count", "x-session-count", "sessions", "session_timeout", "keyword", "keys", "monkey", "turkey",
    "donkey", "whiskey", "hotkey", "keyboard", "secretary", "key_length", "password_min_length",
    "access-control-allow-credentials", "x-ratelimit-limit-tokens", "x-ratelimit-reset-tokens",
    "pageToken", "page_token", "NextToken", "next_token", "continuation-token", "starting_token", "sync_token",
    "language_code", "LanguageCode", "country_code", "session_duration", "session-lifetime",
]


@pytest.mark.parametrize("name", CREDENTIAL_NAMES)
def test_every_credential_name_is_secret(name):
    assert redact.is_secret_header(name) and redact.is_secret_query(name)
    url = redact.redact_url(f"https://api.example.test/v1?{name}=cnryCredName42&page=2")
    assert "cnryCredName42" not in url and "page=2" in url


@pytest.mark.parametrize("name", ["code", "code_verifier", "device_code", "oauth_verifier", "verifier"])
def test_oauth_codes_and_verifiers_are_secret_in_a_query(name):
    url = redact.redact_url(f"https://auth.example.test/token?{name}=cnryOAuthCode42&page=2")
    assert redact.is_secret_query(name) and "cnryOAuthCode42" not in url and "page=2" in url


@pytest.mark.parametrize("name", EVERYDAY_NAMES)
def test_everyday_names_keep_their_values(name):
    """`?author=`, `tokenizer`, `x-session-count` are data a replayed request matches on: masked, the
    stored URL is wrong and the replay may miss."""
    assert not redact.is_secret_header(name) and not redact.is_secret_query(name)
    url = f"https://api.example.test/v1?{name}=Ada+Lovelace&page=2"
    assert redact.redact_url(url) == url and redact.url_secrets(url) == []


def test_every_everyday_word_is_one_a_glued_rule_would_take():
    """Each word the list spares is one an ending, beginning or inside would otherwise take: no dead entry."""
    for word in redact._EVERYDAY_WORDS:
        assert (redact._CREDENTIAL_END.search(word) or word.startswith(redact._CREDENTIAL_START)
                or redact._CREDENTIAL_INSIDE.search(word)), word


def _sse(events: list[dict]) -> str:
    return "".join(f"event: {event.get('type', 'message')}\ndata: {json.dumps(event)}\n\n" for event in events)


def _pieces(text: str, size: int = 3) -> list[str]:
    return [text[start:start + size] for start in range(0, len(text), size)]


KEY = "sk-" + "ant-" + "api03-" + TAIL[:32]
SPLIT_STREAMS = {
    "anthropic text and tool input": _sse(
        [{"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": piece}}
         for piece in _pieces("the key: " + KEY + " ok")]
        + [{"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": piece}}
           for piece in _pieces(json.dumps({"key": KEY}))]),
    "openai responses": _sse([{"type": "response.output_text.delta", "output_index": 0, "content_index": 0,
                               "delta": piece} for piece in _pieces("the key: " + KEY + " ok")]),
    # two tool calls streamed in turns: each call's arguments are one text, whatever lies between
    "openai chat, two tool calls interleaved": "".join(
        "data: " + json.dumps({"choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": call, "function": {"arguments": piece}}]}}]}) + "\r\n\r\n"
        for pair in itertools.zip_longest(_pieces(json.dumps({"k": KEY})), _pieces(json.dumps({"q": "plain words"})))
        for call, piece in enumerate(pair) if piece is not None),
}


@pytest.mark.parametrize("name", sorted(SPLIT_STREAMS))
def test_a_key_a_stream_spells_across_its_events_is_masked(name):
    stream = SPLIT_STREAMS[name]
    assert redact.mask_secrets(stream) == stream  # no event holds it whole
    assert redact.find_stream_secrets(stream) == [redact.find_secrets(KEY)[0]]
    masked = redact.mask_stream_secrets(stream)
    assert TAIL[:8] not in masked and redact.find_stream_secrets(masked) == []
    assert masked.count("\r\n") == stream.count("\r\n")
    spelled: dict[int, str] = {}  # each text of the stream, by its index
    for line in masked.splitlines():
        if line.startswith("data: "):
            event = json.loads(line[6:])
            for tool in event["choices"][0]["delta"]["tool_calls"] if "choices" in event else [event]:
                piece = tool["function"]["arguments"] if "function" in tool else event["delta"]
                piece = piece if isinstance(piece, str) else piece.get("text", piece.get("partial_json"))
                spelled[tool.get("index", 0)] = spelled.get(tool.get("index", 0), "") + piece
    assert "[redacted]" in spelled[0] and KEY[8:] not in "".join(spelled.values()), spelled
    if "interleaved" in name:
        assert spelled == {0: '{"k": "[redacted]"}', 1: '{"q": "plain words"}'}


def test_a_stream_without_a_split_secret_is_returned_as_is():
    stream = SPLIT_STREAMS["openai responses"].replace(KEY[:3], "sq-")
    assert redact.mask_stream_secrets(stream) is stream and redact.find_stream_secrets(stream) == []
