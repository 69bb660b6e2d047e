"""Response bytes as text: content-encoding undone, whatever the header claims."""

from __future__ import annotations

import zlib

_GZIP_MAGIC = b"\x1f\x8b"


def decode_body(body: bytes, content_encoding: str | None) -> bytes:
    """Decoded bytes. Trust the bytes over the header: recorders often keep `gzip` over a body they
    already decoded, and a cut stream may not decompress fully (what did decode is kept)."""
    if not body:
        return body
    encoding = (content_encoding or "").lower()
    if body[:2] == _GZIP_MAGIC:
        decoder = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            return decoder.decompress(body)
        except zlib.error:
            return body
    if "br" in encoding:
        try:
            import brotli

            return brotli.decompress(body)
        except Exception:  # brotli raises its own error type; undecodable stays raw
            return body
    if "deflate" in encoding:
        for wbits in (zlib.MAX_WBITS, -zlib.MAX_WBITS):
            try:
                return zlib.decompress(body, wbits)
            except zlib.error:
                continue
    return body

