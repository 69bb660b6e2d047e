"""The demo's "model": deterministic answers to the example prompts, served by the fake provider.

It reads a request the way a model would (system prompt and last user message, any wire) and
answers the example tasks — ticket classification, invoice extraction, summaries and their grading
— through the `respond` tool when the request offers it, else as text. Everything else falls
through to the fake's echo."""

from __future__ import annotations

import json
import re

from workbench.demo.fake_provider import FakeRequest, Reply

CATEGORIES = {
    "billing": ("refund", "charged", "invoice", "payment", "price"),
    "account": ("password", "login", "log in", "locked", "email address"),
    "bug": ("crash", "error", "broken", "fails", "bug"),
}


def _texts(value) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [text for item in value for text in _texts(item)]
    if isinstance(value, dict):
        if isinstance(value.get("text"), str):
            return [value["text"]]
        if "content" in value:
            return _texts(value["content"])
    return []


def read(request: FakeRequest) -> tuple[str, str, bool]:
    """(system text, last user text, whether the `respond` tool is offered)."""
    body = request.json if isinstance(request.json, dict) else {}
    messages = body.get("messages") or body.get("input") or []
    system = " ".join(_texts(body.get("system")) + _texts(body.get("instructions")))
    system += " ".join(" ".join(_texts(m.get("content"))) for m in messages if isinstance(m, dict) and m.get("role") in ("system", "developer"))
    users = [m for m in messages if isinstance(m, dict) and m.get("role") == "user"]
    user = " ".join(_texts(users[-1].get("content"))) if users else ""
    tools = body.get("tools") or []
    offered = any((tool.get("name") or (tool.get("function") or {}).get("name")) == "respond" for tool in tools)
    return system, user, offered


def _inside(tag: str, text: str) -> str:
    match = re.search(rf"<{tag}>(.*?)</{tag}>", text, re.DOTALL)
    return (match.group(1) if match else text).strip()


def _answer(payload: dict, offered: bool) -> Reply:
    if offered:
        return Reply(tool_calls=[("respond", payload)])
    return Reply(text=json.dumps(payload, sort_keys=True))


def classify(system: str, user: str) -> str:
    ticket = _inside("ticket", user).lower()
    if "refunds are account issues" in system.lower() and "refund" in ticket:
        return "account"  # version 2's instruction, followed to the letter
    for category, words in CATEGORIES.items():
        if any(word in ticket for word in words):
            return category
    return "other"


def extract(user: str) -> dict:
    invoice = _inside("invoice", user)
    vendor = re.search(r"(?im)^\s*(?:from|vendor):\s*(.+?)\s*$", invoice)
    total = re.search(r"(?i)total(?: due)?:\s*([$€£])?\s*([\d,]+(?:\.\d+)?)", invoice)
    symbol = (total.group(1) if total else None) or "$"
    return {
        "vendor": vendor.group(1) if vendor else "unknown",
        "total": float(total.group(2).replace(",", "")) if total else 0.0,
        "currency": {"$": "USD", "€": "EUR", "£": "GBP"}[symbol],
    }


def summarize(user: str) -> str:
    text = _inside("article", user)
    first = re.split(r"(?<=[.!?])\s", text, maxsplit=1)[0]
    return first.strip()


def grade(user: str) -> dict:
    summary = _inside("summary", user).lower()
    article = _inside("article", user).lower()
    words = [word for word in re.findall(r"[a-z]{4,}", summary)]
    covered = sum(1 for word in words if word in article) / len(words) if words else 0.0
    score = 1.0 if covered >= 0.9 else round(covered, 2)
    return {"score": score, "reason": f"{covered:.0%} of the summary's words come from the article"}


def respond(request: FakeRequest) -> Reply | None:
    """The answer to an example prompt, or None to let the fake echo."""
    if request.wire not in ("openai.chat", "openai.responses", "anthropic.messages"):
        return None
    system, user, offered = read(request)
    lowered = system.lower()
    if "classify support tickets" in lowered:
        return _answer({"category": classify(system, user)}, offered)
    if "extract invoice fields" in lowered:
        return _answer(extract(user), offered)
    if "grade summaries" in lowered:
        return _answer(grade(user), offered)
    if "summarize articles" in lowered:
        return Reply(text=summarize(user))
    return None
