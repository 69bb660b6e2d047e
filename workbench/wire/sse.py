"""Server-sent events, parsed from bytes that may be cut anywhere."""

from __future__ import annotations

import json
from dataclasses import dataclass


@dataclass
class Event:
    event: str | None
    data: str

    def json(self):
        """The data as JSON, or None when it is not (a `[DONE]` marker, a torn last event)."""
        try:
            return json.loads(self.data)
        except (json.JSONDecodeError, ValueError):
            return None


def parse_events(text: str) -> list[Event]:
    """Every complete-looking event in `text`; comment lines (`: ...`) are skipped."""
    events: list[Event] = []
    name: str | None = None
    data: list[str] = []
    for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n"):
        if line == "":
            if data:
                events.append(Event(name, "\n".join(data)))
            name, data = None, []
        elif line.startswith(":"):
            continue
        elif line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].lstrip(" ") if line.startswith("data: ") else line[5:])
    if data:
        events.append(Event(name, "\n".join(data)))
    return events


def looks_like_sse(body: bytes, content_type: str) -> bool:
    if "text/event-stream" in content_type:
        return True
    head = body[:64].lstrip()
    return head.startswith((b"data:", b"event:", b":"))
