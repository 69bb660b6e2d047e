"""The fake provider's embeddings endpoint (`POST /v1/embeddings`), as OpenAI answers it.

Each input (a string, or a list of strings) costs its tokens by the fake tokenizer (4 UTF-8 bytes a
token, rounded up); `usage.prompt_tokens` and `usage.total_tokens` are their sum. Each vector has
`DIMENSIONS` floats derived from a hash of its text (the same text, the same vector), sent as JSON
numbers or, when `encoding_format` is `base64` (what the openai SDK asks by default), as base64 of
little-endian float32. Embeddings consume no scripted reply."""

from __future__ import annotations

import base64
import hashlib
import struct
from typing import Any

DIMENSIONS = 8


def _vector(text: str) -> list[float]:
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    # multiples of 1/128: exact in float32 too, so the JSON and base64 forms carry the same numbers
    return [(byte - 128) / 128 for byte in digest[:DIMENSIONS]]


def inputs_of(body: dict) -> list[str] | None:
    """The texts to embed, or None when `input` is not a string or a list of strings."""
    value = body.get("input")
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and value and all(isinstance(item, str) for item in value):
        return value
    return None


def render_embeddings(texts: list[str], model: str, tokens: int, encoding: Any) -> dict:
    data = []
    for index, text in enumerate(texts):
        vector: Any = _vector(text)
        if encoding == "base64":
            vector = base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")
        data.append({"object": "embedding", "index": index, "embedding": vector})
    return {"object": "list", "data": data, "model": model,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}
