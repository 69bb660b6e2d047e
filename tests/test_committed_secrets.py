"""Nothing committed looks like a secret to Workbench's own rules: every tracked file (source, docs,
fixtures, cassettes, images) read whole through the shape rules `mask_secrets` masks with, and every
committed cassette as `workbench cassettes check` reads it (its bodies decoded, gzip included, its
headers by name). Test keys are built at run time (`"sk-" + "proj-" + tail`), so a whole key-shaped
literal in the tree is a leak or a slip. What the rules match and is no secret is listed below, each
entry with why; nothing else passes."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from workbench.replay.check import CASSETTE_SUFFIXES, check_cassette
from workbench.wire import redact

ROOT = Path(__file__).resolve().parents[1]
# Other projects' recordings, kept byte for byte (tests/fixtures/corpus/README.md): their expired
# Cloudflare bot-management cookies and OpenAI project ids are the real-world input the scrubber is
# tested on, and no credential; headers there are read by shape only (their `openai-organization`,
# `anthropic-organization-id`, placeholder `authorization` values are what Workbench scrubs from its own).
CORPUS = "tests/fixtures/corpus/"
CORPUS_KINDS = frozenset({"session cookie", "project id"})
# exact texts the shape rules match that hold no secret: path -> texts
NOT_SECRETS = {
    # a documented false positive of the glued rule (a word, then `sk-` and a camelCase id with a
    # digit), in a section nobody edits after it is written
    "benchmarks/RESULTS.md": {"sk-" "getUserAccountSettingsV2"},
}


def _tracked() -> list[str]:
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: the committed files are unknown")
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z"], capture_output=True, check=True).stdout
    return [path for path in listed.decode().split("\0") if path and (ROOT / path).is_file()]


def _leaks(path: str, text: str) -> list[str]:
    """What the shape rules would mask in `text` and no entry above allows: `path: kind: text`."""
    allowed = NOT_SECRETS.get(path, set())
    return [f"{path}: {kind}: {match.group()[:60]!r}" for kind, match in redact._matches(text)
            if match.group() not in allowed and not (path.startswith(CORPUS) and kind in CORPUS_KINDS)]


def test_no_committed_file_holds_a_secret_shaped_text():
    leaks = []
    for path in _tracked():
        # binary files too: a key is ASCII, and stays whole through any decoding that keeps ASCII
        leaks += _leaks(path, (ROOT / path).read_bytes().decode("utf-8", "replace"))
    assert leaks == [], "\n".join(leaks)


def test_no_committed_cassette_holds_what_scrubbing_removes():
    findings = []
    for path in _tracked():
        if Path(path).suffix not in CASSETTE_SUFFIXES:
            continue
        report = check_cassette(ROOT / path)
        if report.error is not None:  # not a cassette (a manifest, an OTLP payload): read whole above
            continue
        in_corpus = path.startswith(CORPUS)
        findings += [f"{path}: {finding}" for finding in report.secrets
                     if not (in_corpus and (" header " in finding or finding.endswith(tuple(CORPUS_KINDS))))]
    assert findings == [], "\n".join(findings)


def test_a_planted_key_is_found_in_any_committed_kind_of_file():
    """The walk reads what it must: a key in source, a cassette's text, and binary bytes."""
    key = "sk-" + "proj-" + "Xq3vT7bN" + "w9LkZp2R" + "yF4hJ6sD"
    assert _leaks("tests/example.py", f'KEY = "{key}"\n')
    assert _leaks("tests/fixtures/cassettes/x.yaml", f"      authorization:\n      - Bearer {key}\n")
    assert _leaks("docs/x.png", (b"\x89PNG\r\n\x1a\n\x00\xff" + key.encode() + b"\x00").decode("utf-8", "replace"))
    assert _leaks(CORPUS + "x.yaml", key)  # the corpus passes cookies and project ids only
    assert not _leaks(CORPUS + "x.yaml", "set-cookie: __cf_bm=" + "AbCdEfGh1234-1709033852-1.0")
    assert not _leaks("workbench/runtime/loop.py", "cache=agent.prompt_cache, session=" "agent.session, prompt")
