"""The demo's company: a small online shop whose support team, docs site and back office use LLMs.
Its documents (long enough to be worth caching: over the providers' minimum cacheable prefix), its
customers and users, the tickets and questions they send, and the answers its "model" gives
(served by the fake provider, deterministic)."""

from __future__ import annotations

import hashlib
import json

from workbench.demo.answers import read
from workbench.demo.fake_provider import FakeRequest, Reply, count_tokens

CUSTOMERS = ["acme", "globex", "initech", "umbrella", "hooli", "stark", "wayne", "tyrell", "soylent", "cyberdyne"]
# user ids as an app would tag them; each belongs to one customer
USERS = [f"u-{1000 + 37 * n}" for n in range(48)]
USER_CUSTOMER = {user: CUSTOMERS[n % len(CUSTOMERS)] for n, user in enumerate(USERS)}

TICKETS = [
    "I was charged twice this month, please refund one payment.", "The password reset link never arrives.",
    "The app crashes when I export a report to PDF.", "Can I get a dark mode?",
    "My invoice shows the wrong VAT number.", "I am locked out after three login attempts.",
    "Sync fails with error 500 since this morning.", "Please cancel my subscription at the end of the month.",
    "How do I add a second admin to our account?", "The mobile app logs me out every few minutes.",
    "I need a refund for the annual plan I bought by mistake.", "Search returns nothing for orders older than 2023.",
    "Can you change the billing email address?", "The checkout page shows prices in the wrong currency.",
]
FOLLOW_UPS = [
    "Thanks. How long will that take?", "I tried that and it still does not work.",
    "Can you check my last order as well?", "Is there a phone number I can call?",
    "OK, and will I get an email when it is done?", "That worked, thank you!",
]
DOCS_QUESTIONS = [
    "How do I rotate an API key?", "What does the export endpoint return?", "How are webhooks retried?",
    "Can I restrict a key to one project?", "What is the rate limit of the search API?",
    "How do I paginate through orders?", "Which currencies does the checkout support?",
    "How do I verify a webhook signature?", "Where do I find the audit log?",
]
VENDORS = [("ACME Corp", "$"), ("Globex GmbH", "€"), ("Initech Ltd", "£"), ("Umbrella Logistics", "$"),
           ("Hooli Cloud", "$"), ("Stark Supplies", "€"), ("Wayne Freight", "$"), ("Tyrell Parts", "£")]

_SUPPORT_TOPICS = [
    ("Refunds", "A customer may ask for a refund within 30 days of a card payment. Refunds go back to the card "
     "used; bank transfers are refunded by transfer within five business days. Annual plans bought by mistake are "
     "refunded in full when no seat was used. Never promise a refund for a payment older than 30 days; escalate "
     "it to billing with the order id instead."),
    ("Double charges", "When a customer reports a double charge, check the payments list for two captures with the "
     "same amount within ten minutes. A pending authorisation is not a charge: it disappears within seven days. "
     "A real duplicate is refunded at once and the customer gets the refund id."),
    ("Accounts", "Password reset links expire after one hour and are sent from no-reply@shop.example. After three "
     "failed logins an account is locked for fifteen minutes; an admin can unlock it from the members page. Never "
     "change the email address of an account without the owner's confirmation from the old address."),
    ("Invoices", "Invoices are issued on the first day of each month. The VAT number, the billing address and the "
     "billing email can be changed by an admin under Settings, Billing; the change applies to the next invoice, and "
     "support can reissue the last one on request."),
    ("Outages", "When several customers report errors at once, check the status page before answering. Acknowledge "
     "the problem, give the incident link, and never give an estimate the status page does not give."),
    ("Tone", "Answer in two or three sentences, in the customer's language, without blaming them. Name the next "
     "step and who takes it. Sign as the support team, never with a personal name."),
]
_DOCS_TOPICS = [
    ("Authentication", "Every request carries an API key in the Authorization header as a bearer token. Keys are "
     "scoped to one project and to read or write access. Rotate a key by creating a new one, deploying it, then "
     "revoking the old one; both work in the meantime."),
    ("Pagination", "List endpoints return at most 100 items and a cursor. Pass the cursor back as the `after` "
     "parameter to get the next page; an empty cursor means the last page. Cursors expire after 24 hours."),
    ("Webhooks", "Webhooks are signed with HMAC-SHA256 over the raw body, with the endpoint's secret; the signature "
     "is in the Shop-Signature header. A delivery that does not get a 2xx answer is retried with exponential "
     "backoff for three days, at most 15 times."),
    ("Rate limits", "The search API allows 10 requests per second per key and the other endpoints 50; a request "
     "over the limit gets a 429 answer with a Retry-After header in seconds."),
    ("Exports", "The export endpoint starts an asynchronous job and returns its id; poll the job until its status "
     "is done, then download the file from the signed URL it carries, valid for one hour."),
    ("Currencies", "Checkout supports 24 currencies; amounts are integers in the currency's minor unit, so 1999 is "
     "19.99 in USD and 1999 in JPY. The audit log lists every change to prices and keys for 400 days."),
]
_POLICY_TOPICS = [
    ("Tools", "Look the order up with order_status before saying anything about its delivery, and the region's "
     "rules up with refund_policy before promising a refund. Never guess an order's state."),
    ("Orders", "An order ships within two business days. A shipped order can be returned within 30 days; a "
     "returned order is refunded when the warehouse receives it."),
    ("Escalation", "Escalate to a human when the customer asks for one, when the order is above 1,000 in any "
     "currency, or when a tool fails twice."),
]


def _document(title: str, topics: list[tuple[str, str]], tokens: int) -> str:
    """A document of at least `tokens` tokens: its sections, then numbered notes on them (the way
    a handbook grows), deterministic."""
    lines = [f"# {title}"]
    for heading, text in topics:
        lines.append(f"## {heading}\n{text}")
    note = 0
    while count_tokens("\n\n".join(lines)) < tokens:
        heading, text = topics[note % len(topics)]
        sentence = text.split(". ")[(note // len(topics)) % len(text.split(". "))].rstrip(".")
        lines.append(f"Note {note + 1} ({heading.lower()}): {sentence}.")
        note += 1
    return "\n\n".join(lines)


# the long, stable prefixes each app sends first: all above the 1,024 tokens the providers need
SUPPORT_HANDBOOK = _document("Support handbook", _SUPPORT_TOPICS, 1700)
DOCS = _document("Shop API documentation", _DOCS_TOPICS, 3000)
AGENT_POLICY = _document("Support agent policy", _POLICY_TOPICS + _SUPPORT_TOPICS[:3], 1300)


def _pick(options: list[str], key: str) -> str:
    return options[int(hashlib.sha256(key.encode()).hexdigest(), 16) % len(options)]


_SUPPORT_ANSWERS = {
    "refund": "I have started the refund; it reaches your card within five business days, and you will get an "
              "email with its id.",
    "charged": "I can see two captures of the same amount, so I have refunded the duplicate right away.",
    "password": "Reset links come from no-reply@shop.example and expire after an hour; I have sent you a new one.",
    "locked": "Your account unlocks by itself fifteen minutes after the third attempt; an admin can also unlock it.",
    "invoice": "An admin can change that under Settings, Billing; I can reissue your last invoice once it is fixed.",
    "vat": "An admin can change the VAT number under Settings, Billing; the next invoice carries it.",
    "crash": "Thanks for the report: our engineers are looking into the export crash, and I will update you here.",
    "error": "We are seeing errors on sync right now; the status page has the incident and its updates.",
    "cancel": "Your subscription will end on the last day of this month, and you will not be charged again.",
}
_DOCS_ANSWERS = {
    "rotate": "Create a new key, deploy it, then revoke the old one: both work in the meantime.",
    "export": "It returns a job id; poll the job until it is done, then download the file from its signed URL.",
    "webhook": "Deliveries without a 2xx answer are retried with exponential backoff for three days, 15 times at most.",
    "signature": "Compute HMAC-SHA256 over the raw body with the endpoint's secret and compare it with Shop-Signature.",
    "restrict": "Yes: every key is scoped to one project, with read or write access.",
    "rate limit": "10 requests per second per key on search, 50 elsewhere; over it you get a 429 with Retry-After.",
    "paginate": "Pass the cursor of each page back as `after`; an empty cursor means you reached the last page.",
    "currenc": "24 currencies, as integers in the minor unit of each.",
    "audit": "Under Settings, Audit log: every change to prices and keys, kept for 400 days.",
}


def _keyed(answers: dict[str, str], text: str, fallback: list[str]) -> str:
    lowered = text.lower()
    for word, answer in answers.items():
        if word in lowered:
            return answer
    return _pick(fallback, text)


def answer(request: FakeRequest) -> Reply | None:
    """The company's apps' answers: support chats, docs questions and the nightly digest."""
    system, user, _ = read(request)
    if "Support handbook" in system:
        return Reply(text=_keyed(_SUPPORT_ANSWERS, user, [
            "Thanks for writing in. I have passed this to the right team, and you will hear from us today.",
            "Glad to help: you will get an email as soon as it is done, usually within the hour.",
            "I have checked your account and everything looks right on our side now; tell me if it happens again."]))
    if "Shop API documentation" in system:
        return Reply(text=_keyed(_DOCS_ANSWERS, user, ["The API reference covers this under its Guides section."]))
    body = request.json if isinstance(request.json, dict) else {}
    if "digest" in str(body.get("instructions", "")).lower():
        tickets = json.dumps(body.get("input", ""))
        return Reply(text=f"Yesterday: {tickets.count('ticket')} tickets; most were about billing, then accounts. "
                          "No incident is open.")
    return None
