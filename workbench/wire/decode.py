"""Response bytes as text: content-encoding undone, whatever the header claims."""

from __future__ import annotations

import io
import zlib

_GZIP_MAGIC = b"\x1f\x8b"
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
# a body is decoded to be scanned for secrets before it is kept: one that decodes past this (a
# compression bomb) is not kept at all, since what is not read cannot be known clean
MAX_DECODED_BYTES = 64 * 1024 * 1024
TOO_BIG = b"[workbench: body over 64 MB once decompressed, not kept]"
NOT_DECODED = b"[workbench: zstd body not kept, it could not be decompressed to be scanned for secrets]"


def looks_compressed(body: bytes) -> bool:
    """Whether `body` starts as gzip or zstd do (`decode_body` decodes them whatever the headers say)."""
    return body[:2] == _GZIP_MAGIC or body[:4] == _ZSTD_MAGIC


def decode_body(body: bytes, content_encoding: str | None, cap: int = MAX_DECODED_BYTES) -> bytes:
    """Decoded bytes. Trust the bytes over the header: recorders often keep `gzip` over a body they
    already decoded, and a cut stream may not decompress fully (what did decode is kept). Past `cap`
    bytes decoded, `TOO_BIG` stands for the body."""
    if not body:
        return body
    encoding = (content_encoding or "").lower()
    if body[:2] == _GZIP_MAGIC:
        return _inflated(body, 16 + zlib.MAX_WBITS, cap, body)
    if body[:4] == _ZSTD_MAGIC:
        return _zstd(body, cap)
    if "br" in encoding:
        try:
            import brotli

            data = brotli.Decompressor().process(body, output_buffer_limit=cap + 1)
        except Exception:  # brotli raises its own error type; undecodable stays raw
            return body
        return TOO_BIG if len(data) > cap else data
    if "deflate" in encoding:
        for wbits in (zlib.MAX_WBITS, -zlib.MAX_WBITS):
            data = _inflated(body, wbits, cap, None)
            if data is not None:
                return data
    return body


def _inflated(body: bytes, wbits: int, cap: int, failed: bytes | None) -> bytes | None:
    decoder = zlib.decompressobj(wbits)
    try:
        data = decoder.decompress(body, cap + 1)
    except zlib.error:
        return failed
    return TOO_BIG if len(data) > cap else data


def _zstd(body: bytes, cap: int) -> bytes:
    """A zstd body decoded; its raw frame holds short texts as they are, so one that cannot be
    decoded (no `zstandard` installed, a torn frame) is not kept either."""
    try:
        import zstandard

        data = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(body), read_across_frames=True).read(cap + 1)
    except Exception:  # zstandard's own error types, or no zstandard
        return NOT_DECODED
    return TOO_BIG if len(data) > cap else data
