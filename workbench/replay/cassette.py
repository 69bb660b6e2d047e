"""vcrpy cassettes, read with a safe loader only: YAML or JSON, vcrpy's current layout
(`response.status` / `body.string`), the older httpx layout (`status_code` / `content`), `!!binary`
gzip or brotli bodies, and pydantic-ai's `parsed_body` mappings.

A cassette is input anyone can hand us, so reading it is bounded: a file over `MAX_CASSETTE_BYTES`,
YAML whose aliases expand it past `MAX_ALIAS_EXPANSION` times its written size (a "billion laughs"),
nesting too deep to parse, or any interaction of the wrong shape is `WB_CASSETTE_INVALID`."""

from __future__ import annotations

import base64
import functools
import json
from collections.abc import Sequence
from pathlib import Path

import orjson
from pydantic import BaseModel, Field

from workbench.errors import WorkbenchError
from workbench.wire.call import Exchange

MAX_CASSETTE_BYTES = 256 * 1024 * 1024
# aliases may repeat what is written (vcrpy's writer shares equal header mappings), not multiply it
MAX_ALIAS_EXPANSION = 10
_ALLOWED_EXPANSION_NODES = 10_000  # a small document may alias more than 10x its own few nodes


@functools.cache
def _yaml():
    """PyYAML and its safe loader, imported on the first YAML cassette: a JSON one (what an eval
    records) never needs it. The C loader is several times faster; both are safe loaders."""
    import yaml

    return yaml, getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class RecordedRequest(BaseModel):
    method: str = "POST"
    uri: str
    headers: dict[str, list[str]] = Field(default_factory=dict)
    body: bytes = b""


class RecordedResponse(BaseModel):
    status: int
    reason: str = ""
    headers: dict[str, list[str]] = Field(default_factory=dict)
    body: bytes = b""


class Interaction(BaseModel):
    request: RecordedRequest
    response: RecordedResponse

    def exchange(self) -> Exchange:
        return Exchange(
            method=self.request.method,
            url=self.request.uri,
            request_headers=_flat(self.request.headers),
            request_body=self.request.body,
            status=self.response.status,
            response_headers=_flat(self.response.headers),
            response_body=self.response.body,
        )


def _flat(headers: dict[str, list[str]]) -> dict[str, str]:
    return {name: ", ".join(values) for name, values in headers.items()}


def _bytes(value) -> bytes:
    """A body in any of the stored shapes, as bytes."""
    if value is None:
        return b""
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, dict):
        if "parsed_body" in value:  # pydantic-ai: the JSON body as a mapping
            return json.dumps(value["parsed_body"]).encode("utf-8")
        if "base64_string" in value:
            return base64.b64decode(value["base64_string"])
        return _bytes(value.get("string"))
    if isinstance(value, (list, int, float)):
        return json.dumps(value).encode("utf-8")
    raise ValueError(f"unsupported body of type {type(value).__name__}")


def _headers(value) -> dict[str, list[str]]:
    if not isinstance(value, dict):
        return {}
    return {str(name): [str(v) for v in (vs if isinstance(vs, list) else [vs])] for name, vs in value.items()}


def _mapping(value, what: str) -> dict:
    if not isinstance(value, dict):
        raise ValueError(f"{what} is a {type(value).__name__}, not a mapping")
    return value


def _status(value) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(f"status {value!r} is not an HTTP status code")
    status = int(value)
    if not 100 <= status <= 599:
        raise ValueError(f"status {status} is not an HTTP status code")
    return status


def _interaction(raw) -> Interaction:
    raw = _mapping(raw, "the interaction")
    request, response = _mapping(raw.get("request"), "request"), _mapping(raw.get("response"), "response")
    if not isinstance(request.get("uri"), str):
        raise ValueError(f"request.uri {request.get('uri')!r} is not a URL")
    request_body = request.get("body")
    if request_body is None and "parsed_body" in request:
        request_body = {"parsed_body": request["parsed_body"]}
    response_body = response.get("body", response.get("content"))
    if response_body is None and "parsed_body" in response:
        response_body = {"parsed_body": response["parsed_body"]}
    status = response.get("status", response.get("status_code"))
    if isinstance(status, dict):  # vcrpy: {code, message}
        reason, status = status.get("message", ""), status.get("code")
    else:
        reason = ""
    return Interaction(
        request=RecordedRequest(
            method=str(request.get("method", "POST")).upper(),
            uri=request["uri"],
            headers=_headers(request.get("headers")),
            body=_bytes(request_body),
        ),
        response=RecordedResponse(status=_status(status), reason=str(reason or ""),
                                  headers=_headers(response.get("headers")), body=_bytes(response_body)),
    )


def _alias_expansion(text: str | bytes) -> tuple[int, int]:
    """(nodes as written, nodes once every alias is expanded) of a YAML text, from its events
    alone: linear in the text, whatever the aliases would expand to."""
    sizes: dict[str, int] = {}
    stack: list[list] = [[0, None]]
    written = 0
    yaml, loader = _yaml()
    for event in yaml.parse(text, Loader=loader):
        if isinstance(event, yaml.AliasEvent):
            stack[-1][0] += sizes.get(event.anchor, 1)
            written += 1
        elif isinstance(event, yaml.ScalarEvent):
            stack[-1][0] += 1
            written += 1
            if event.anchor:
                sizes[event.anchor] = 1
        elif isinstance(event, yaml.CollectionStartEvent):
            stack.append([1, event.anchor])
            written += 1
        elif isinstance(event, yaml.CollectionEndEvent):
            size, anchor = stack.pop()
            if anchor:
                sizes[anchor] = size
            stack[-1][0] += size
    return written, stack[0][0]


def _invalid(name: str, detail: str) -> WorkbenchError:
    return WorkbenchError(
        "WB_CASSETTE_INVALID", f"{name} is not a readable cassette: {detail}",
        f"re-record {name} with `workbench` or vcrpy; Python-object YAML tags are never loaded",
    )


_MALFORMED = (KeyError, TypeError, ValueError, OverflowError, RecursionError)  # what a wrong shape raises


def _malformed(name: str, index: int, exc: BaseException) -> WorkbenchError:
    return WorkbenchError(
        "WB_CASSETTE_INVALID", f"{name} interaction {index} is malformed: {type(exc).__name__}: {exc}",
        f"remove or re-record interaction {index} of {name}",
    )


def _no_interactions(name: str) -> WorkbenchError:
    return WorkbenchError("WB_CASSETTE_INVALID", f"{name} has no `interactions` list",
                          f"check that {name} is a vcrpy cassette (a mapping with `interactions:`)")


def parse_cassette(text: str | bytes, name: str = "<cassette>") -> list[Interaction]:
    """Interactions of a cassette's text, JSON or YAML; anything else is WB_CASSETTE_INVALID."""
    return parse_cassette_with_meta(text, name)[0]


def parse_cassette_with_meta(text: str | bytes, name: str = "<cassette>") -> tuple[list[Interaction], dict]:
    """The interactions and Workbench's own mapping in the file (`workbench`: format, request
    hashes), parsed once; the mapping is empty for a cassette another tool wrote."""
    return _read_document(parse_document(text, name), name)


def parse_document(text: str | bytes, name: str = "<cassette>") -> dict:
    """A cassette's text as the mapping written (`interactions`, `version`, ...), read with the
    bounds above; anything else is WB_CASSETTE_INVALID."""
    if len(text) > MAX_CASSETTE_BYTES:
        raise _invalid(name, f"{len(text):,} bytes, over the limit of {MAX_CASSETTE_BYTES:,}")
    is_json = text.lstrip()[:1] in ("{", b"{")
    yaml_error = ValueError if is_json else _yaml()[0].YAMLError
    try:
        if is_json:
            data = json.loads(text)
        else:
            yaml, loader = _yaml()
            if ("&" if isinstance(text, str) else b"&") in text:  # anchors: aliases may multiply the text
                written, expanded = _alias_expansion(text)
                if expanded > MAX_ALIAS_EXPANSION * written + _ALLOWED_EXPANSION_NODES:
                    raise _invalid(name, f"its YAML aliases expand {written:,} nodes to {expanded:,} "
                                         f"(more than {MAX_ALIAS_EXPANSION}x)")
            data = yaml.load(text, Loader=loader)  # noqa: S506 - a safe loader
    except (yaml_error, ValueError, UnicodeDecodeError) as exc:  # JSONDecodeError is a ValueError
        raise _invalid(name, str(exc).splitlines()[0] if str(exc) else type(exc).__name__) from exc
    except RecursionError as exc:
        raise _invalid(name, "nested too deeply to read") from exc
    if not isinstance(data, dict) or not isinstance(data.get("interactions"), list):
        raise _no_interactions(name)
    return data


def _read_document(data: dict, name: str) -> tuple[list[Interaction], dict]:
    interactions = []
    for index, raw in enumerate(data["interactions"]):
        try:
            interactions.append(_interaction(raw))
        except _MALFORMED as exc:
            raise _malformed(name, index, exc) from exc
    meta = data.get("workbench")
    return interactions, meta if isinstance(meta, dict) else {}


def load_cassette(path: Path | str) -> list[Interaction]:
    return load_cassette_with_meta(path)[0]


def load_cassette_with_meta(path: Path | str) -> tuple[list[Interaction], dict]:
    return load_cassette_with_document(path)[:2]


def load_cassette_with_document(path: Path | str) -> tuple[list[Interaction], dict, dict]:
    """The interactions, Workbench's mapping and the whole document as parsed (which vcrpy, in a
    pytest-recording suite, takes instead of parsing the file a second time)."""
    path = Path(path)
    try:
        if path.is_dir():
            raise _invalid(str(path), "it is a folder")
        size = path.stat().st_size
        if size > MAX_CASSETTE_BYTES:
            raise _invalid(str(path), f"{size:,} bytes, over the limit of {MAX_CASSETTE_BYTES:,}")
        text = path.read_bytes()
    except FileNotFoundError as exc:
        raise WorkbenchError(
            "WB_CASSETTE_NOT_FOUND", f"no cassette at {path}", "record it: WORKBENCH_RECORD_MODE=record <your command>"
        ) from exc
    except OSError as exc:
        raise _invalid(str(path), f"cannot read it: {exc}") from exc
    document = parse_document(text, str(path))
    return (*_read_document(document, str(path)), document)


# --- streaming a large cassette ------------------------------------------------------------------

_CHUNK = 1 << 20
_SPACE = " \t\r\n"
_DECODER = json.JSONDecoder()  # the standard library's, as `parse_cassette_with_meta` reads a cassette


class _Reader:
    """A JSON document read forward in chunks: the text seen so far but not consumed, and the byte
    offset in the file of that text's first character."""

    def __init__(self, handle, name: str) -> None:
        import codecs

        self.handle, self.name = handle, name
        self.decoder = codecs.getincrementaldecoder("utf-8")()
        self.text, self.pos = "", 0
        self.mark, self.mark_byte = 0, 0  # a character of the text read so far, and its byte in the file
        self.eof = False

    def _more(self) -> bool:
        if self.eof:
            return False
        chunk = self.handle.read(max(_CHUNK, len(self.text)))  # doubles while one value outgrows it
        self.eof = not chunk
        self.byte()  # the mark moves to what is consumed, then that is dropped
        self.text, self.pos, self.mark = self.text[self.pos:] + self.decoder.decode(chunk, final=self.eof), 0, 0
        return True

    def peek(self) -> str:
        """The next character that is not white space ("" at the end)."""
        while True:
            while self.pos < len(self.text) and self.text[self.pos] in _SPACE:
                self.pos += 1
            if self.pos < len(self.text) or not self._more():
                return self.text[self.pos:self.pos + 1]

    def expect(self, char: str) -> None:
        if self.peek() != char:
            raise ValueError(f"expected {char!r} at byte {self.byte()}")
        self.pos += 1

    def byte(self) -> int:
        """The file's byte at the current position (counted from the last one asked: positions only grow)."""
        self.mark_byte += len(self.text[self.mark:self.pos].encode("utf-8"))
        self.mark = self.pos
        return self.mark_byte

    def value(self):
        """The next JSON value, and its (start, end) bytes in the file."""
        self.peek()
        while True:
            try:
                value, end = _DECODER.raw_decode(self.text, self.pos)
            except ValueError:
                if self._more():
                    continue  # the value runs past the text read so far
                raise
            if end == len(self.text) and not self.eof and self._more():
                continue  # a number may go on in the next chunk
            start = self.byte()
            self.pos = end
            return value, (start, self.byte())


def stream_cassette(path: Path, each) -> dict:
    """Read a JSON cassette one interaction at a time, calling `each(index, interaction, (start,
    end))` with the interaction's bytes in the file, so that no more than one interaction and a
    chunk of text is held at once; returns Workbench's own mapping (`workbench`), empty when
    absent. The same checks as `parse_cassette_with_meta`, the same WB_CASSETTE_INVALID."""
    name = str(path)
    meta, found = {}, False
    with open(path, "rb") as handle:
        reader = _Reader(handle, name)
        try:
            reader.expect("{")
            while reader.peek() != "}":
                key, _ = reader.value()
                reader.expect(":")
                if key == "interactions" and reader.peek() == "[":
                    found = True
                    reader.expect("[")
                    index = 0
                    while reader.peek() != "]":
                        raw, span = reader.value()
                        try:
                            interaction = _interaction(raw)
                        except _MALFORMED as exc:
                            raise _malformed(name, index, exc) from exc
                        each(index, interaction, span)
                        index += 1
                        if reader.peek() == ",":
                            reader.expect(",")
                    reader.expect("]")
                else:
                    value, _ = reader.value()
                    if key == "workbench" and isinstance(value, dict):
                        meta = value
                if reader.peek() == ",":
                    reader.expect(",")
            reader.expect("}")
            if reader.peek() != "":
                raise ValueError(f"extra data at byte {reader.byte()}")
        except (ValueError, UnicodeDecodeError) as exc:
            raise _invalid(name, str(exc).splitlines()[0] if str(exc) else type(exc).__name__) from exc
        except RecursionError as exc:
            raise _invalid(name, "nested too deeply to read") from exc
    if not found:
        raise _no_interactions(name)
    return meta


def read_interaction(fd: int, span: tuple[int, int]) -> Interaction:
    """One interaction of a cassette file, from its bytes (`stream_cassette`'s span)."""
    import os

    start, end = span
    # the standard library, as for a whole file: orjson reads an integer past 64 bits (in a
    # `parsed_body`) as a float without a word, and a check for one costs more than orjson saves
    return _interaction(json.loads(os.pread(fd, end - start, start)))



class StreamedInteractions(Sequence):
    """The interactions of a large cassette file, each read from the file when asked for and not
    kept: only their places in the file stay in memory (16 bytes each), so replaying 100,000 cases
    holds one at a time, not the file. The file stays open, so a recording process replacing it
    meanwhile (a new file, `os.replace`) leaves this one reading the version it indexed."""

    def __init__(self, path: Path, transform) -> None:
        import os
        import weakref
        from array import array

        self._starts, self._ends = array("q"), array("q")
        self._extra: list[Interaction] = []  # recorded in this session, after the file's
        self._transform = transform  # what every interaction goes through as it is read (scrubbing)

        def each(index: int, interaction: Interaction, span: tuple[int, int]) -> None:
            self._starts.append(span[0])
            self._ends.append(span[1])

        self.meta = stream_cassette(path, each)
        self._fd = os.open(path, os.O_RDONLY)
        weakref.finalize(self, os.close, self._fd)

    def __len__(self) -> int:
        return len(self._starts) + len(self._extra)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[position] for position in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(index)
        if index >= len(self._starts):
            return self._extra[index - len(self._starts)]
        return self._transform(read_interaction(self._fd, (self._starts[index], self._ends[index])))

    def append(self, interaction: Interaction) -> None:
        self._extra.append(interaction)

# --- writing -------------------------------------------------------------------------------------

FORMAT_VERSION = 1  # Workbench's own key in the cassette; vcrpy ignores it


def _text(body: bytes) -> str | bytes:
    """Text when the body is UTF-8 (every LLM body), else the bytes themselves, never a lossy decode:
    YAML writes them as `!!binary` (which vcrpy reads), JSON as `base64_string`."""
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        return body


def _binary(value):
    if isinstance(value, bytes):
        return {"base64_string": base64.b64encode(value).decode("ascii")}
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def interaction_dict(interaction: Interaction) -> dict:
    """vcrpy's layout: bodies as text (stored decoded, so a cassette replays without brotli)."""
    request, response = interaction.request, interaction.response
    return {
        "request": {
            "body": _text(request.body) if request.body else None,
            "headers": request.headers,
            "method": request.method,
            "uri": request.uri,
        },
        "response": {
            "body": {"string": _text(response.body)},
            "headers": response.headers,
            "status": {"code": response.status, "message": response.reason or _REASONS.get(response.status, "")},
        },
    }


_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 429: "Too Many Requests",
            500: "Internal Server Error", 529: "Overloaded"}


def dump_cassette(interactions: list[Interaction], fmt: str = "json", extra: dict | None = None) -> str:
    return _dumped(interactions, fmt, extra).decode("utf-8")


def encoded_interaction(interaction: Interaction) -> bytes:
    """One interaction as it stands in a JSON cassette's `interactions` list (indented for its
    place there). A recording session keeps these, so a save joins the file from them instead of
    encoding every interaction again: re-encoding the whole cassette at each save made recording
    grow with N x saves."""
    # JSON text never holds a raw newline (a string escapes it): every newline starts a line
    return orjson.dumps(interaction_dict(interaction), default=_binary, option=orjson.OPT_INDENT_2
                        ).replace(b"\n", b"\n    ")


def _dumped(interactions: list[Interaction], fmt: str, extra: dict | None, encoded: list[bytes] | None = None) -> bytes:
    """The cassette's text as UTF-8 bytes. JSON through orjson, the same text as the standard
    library's `indent=2` (whose pure-Python indenting encoder was most of a recording's time),
    joined from each interaction's `encoded_interaction` (given, or made here); the standard
    library for what orjson refuses in `extra` (a key that is not text, an integer past 64 bits)."""
    meta = {"format": FORMAT_VERSION, **(extra or {})}

    def document() -> dict:
        return {"interactions": [interaction_dict(interaction) for interaction in interactions], "version": 1,
                "workbench": meta}

    if fmt == "yaml":
        yaml = _yaml()[0]
        return yaml.dump(document(), Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper), sort_keys=False,
                         allow_unicode=True).encode("utf-8")
    try:
        workbench = orjson.dumps(meta, option=orjson.OPT_INDENT_2).replace(b"\n", b"\n  ")
    except (TypeError, orjson.JSONEncodeError):
        return (json.dumps(document(), indent=2, ensure_ascii=False, default=_binary) + "\n").encode("utf-8")
    pieces = encoded if encoded is not None else [encoded_interaction(interaction) for interaction in interactions]
    listed = b"[\n    " + b",\n    ".join(pieces) + b"\n  ]" if pieces else b"[]"
    return b'{\n  "interactions": ' + listed + b',\n  "version": 1,\n  "workbench": ' + workbench + b"\n}\n"


def format_of(path: Path) -> str:
    return "yaml" if Path(path).suffix.lower() in {".yaml", ".yml"} else "json"


def write_cassette(path: Path, interactions: list[Interaction], extra: dict | None = None,
                   encoded: list[bytes] | None = None) -> None:
    """Write atomically: a temporary file in the same folder, then `os.replace`. `encoded`: each
    interaction's `encoded_interaction`, when the caller keeps them (a JSON cassette only)."""
    import os
    import tempfile

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = _dumped(interactions, format_of(path), extra, encoded)
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(text)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
