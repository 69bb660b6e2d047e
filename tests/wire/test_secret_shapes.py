"""Every secret shape of `workbench.wire.redact` masks a sample of its own. The patterns are compiled
at their literal's first hit, not at import, so a broken one would show only when a secret of its
shape arrives: each is made to mask one here."""

from __future__ import annotations

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
    "Slack token": "xoxb-" + "1234567890ab",
    "Stripe key": "sk_live_" + "L2" * 9,
    "JSON web token": "eyJ" + "M3" * 5 + ".eyJ" + "N4" * 5 + "." + "O5" * 5,
    "private key": "-----BEGIN PRIVATE KEY-----\nP6P6P6P6\n-----END PRIVATE KEY-----",
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
