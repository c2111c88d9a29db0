"""The second landscape's task: route a support ticket to one of six queues (exact scorer).

A different shape from drone-router: a one-word answer instead of a JSON command, so the loss
is carried by a handful of answer tokens and accuracy moves in steps. The tickets are written
from templates with varied wording, typos and distractors, deterministically from a seed, so
the table can be rebuilt from this file alone.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

QUEUES = {
    "billing": [
        "I was charged twice for my {plan} plan this month",
        "the invoice for {month} shows the wrong amount",
        "why did my card get billed {amount} when my plan costs less",
        "please update the VAT number on my invoices",
        "my payment failed but the money left my account",
        "can I switch from monthly to yearly billing on the {plan} plan",
    ],
    "shipping": [
        "my order {order} has not arrived after {days} days",
        "the tracking number for order {order} does not work",
        "the parcel was delivered to the wrong address",
        "can you ship order {order} to a different address",
        "the courier says the package is lost",
        "how long does delivery to {country} take",
    ],
    "account": [
        "I cannot log in, the password reset email never comes",
        "please change the email address on my account",
        "how do I delete my account and my data",
        "two-factor codes are not accepted any more",
        "my account was locked after too many attempts",
        "I want to add a colleague to my team account",
    ],
    "technical": [
        "the app crashes when I open the {feature} page",
        "export to CSV gives an empty file",
        "the {feature} screen is blank on {browser}",
        "sync has been stuck at {percent} percent since yesterday",
        "I get error {code} when I upload a file",
        "notifications stopped working after the last update",
    ],
    "refund": [
        "I want my money back for order {order}",
        "please refund the {plan} plan, I cancelled within {days} days",
        "the item arrived broken, I would like a refund",
        "how long does a refund to my card take",
        "I returned order {order} two weeks ago and got no refund yet",
        "cancel my subscription and refund the last payment",
    ],
    "sales": [
        "do you offer a discount for {seats} seats",
        "I would like a quote for the enterprise plan",
        "can we get a demo for our team of {seats}",
        "is there a nonprofit price for the {plan} plan",
        "what is the difference between the {plan} and enterprise plans",
        "we want to buy {seats} licences, who do I talk to",
    ],
}
FILLERS = {
    "plan": ["basic", "pro", "team", "starter", "premium"],
    "month": ["January", "March", "June", "September", "November"],
    "amount": ["$49", "$120", "EUR 30", "$9.99", "GBP 75"],
    "order": ["#10442", "A-7781", "#55120", "B-2093", "#90017"],
    "days": ["3", "5", "10", "14", "21"],
    "country": ["Canada", "Germany", "Japan", "Brazil", "Kenya"],
    "feature": ["reports", "calendar", "settings", "dashboard", "inbox"],
    "browser": ["Firefox", "Safari", "Chrome", "Edge"],
    "percent": ["12", "47", "80", "99"],
    "code": ["500", "E42", "0x80070005", "413"],
    "seats": ["20", "50", "120", "300"],
}
OPENERS = ["", "hi, ", "hello team, ", "urgent: ", "quick question - ", "good morning. "]
CLOSERS = ["", " thanks", " please help", " asap", ". regards, sam", " - this is the second time I ask"]
SYSTEM_PROMPT = (
    "You route customer support tickets. Answer with exactly one queue name: " + ", ".join(QUEUES) + ".\n"
)


def _typo(text: str, rng: random.Random) -> str:
    words = text.split()
    i = rng.randrange(len(words))
    w = words[i]
    if len(w) > 3:
        j = rng.randrange(len(w) - 1)
        words[i] = w[:j] + w[j + 1] + w[j] + w[j + 2 :]
    return " ".join(words)


def ticket(queue: str, rng: random.Random) -> str:
    text = rng.choice(QUEUES[queue])
    for key, values in FILLERS.items():
        text = text.replace("{" + key + "}", rng.choice(values))
    if rng.random() < 0.3:
        text = _typo(text, rng)
    text = rng.choice(OPENERS) + text + rng.choice(CLOSERS)
    return text[0].upper() + text[1:] if rng.random() < 0.5 else text


def record(user: str, queue: str, source: str) -> str:
    return json.dumps(
        {
            "messages": [{"role": "user", "content": user}, {"role": "assistant", "content": queue}],
            "meta": {"category": queue, "source": source},
        }
    )


def write_project(root: Path, *, examples: int, gold: int, seed: int = 7) -> None:
    """Fill an initialised (empty) forge-ml project at `root` with the task, `examples` and `gold` lines."""
    rng = random.Random(seed)
    queues = list(QUEUES)
    seen: set[str] = set()

    def draw(n: int, source: str) -> list[str]:
        lines = []
        while len(lines) < n:
            queue = queues[len(lines) % len(queues)]
            user = ticket(queue, rng)
            if user.lower() not in seen:
                seen.add(user.lower())
                lines.append(record(user, queue, source))
        return lines

    gold_lines = draw(gold, "gold")
    canonical = draw(examples, "generate")
    rng.shuffle(canonical)
    (root / "dataset" / "gold.jsonl").write_text("\n".join(gold_lines) + "\n", encoding="utf-8")
    (root / "dataset" / "canonical.jsonl").write_text("\n".join(canonical) + "\n", encoding="utf-8")
    (root / "system_prompt.md").write_text(SYSTEM_PROMPT, encoding="utf-8")
    (root / "mission.md").write_text(
        "# Mission\n\nRoute each support ticket to one queue: " + ", ".join(queues) + ".\n", encoding="utf-8"
    )
