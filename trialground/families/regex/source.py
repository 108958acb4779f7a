"""The `regex` family: one Python regular expression that extracts every item of a kind from a text.

The workspace holds `text.txt` (20-40 lines of filler words with planted items and near misses, random per
task) and `pattern.txt`, where the agent writes the pattern. Six kinds of item, each defined exactly in the
prompt: IPv4 addresses (octets 0-255, no leading zeros), ISO dates (month 01-12, day 01-31), e-mail
addresses of one domain (not its subdomains or longer names), CSS hex colours (`#RGB`, `#RRGGBB`), 24-hour
times (`HH:MM` or `HH:MM:SS`), and version tags `vMAJOR.MINOR.PATCH` (no leading zeros).

The hidden check (`check_regex.py`) applies the pattern with `re.finditer` in a child interpreter under a
timeout to the workspace's text and to a hidden one of the same kind, and each list of whole matches must
equal the items the generator planted, in order: the near misses (`256.1.1.1`, `2024-13-02`,
`x@sub.example.org`, `#12345678`, `24:00`, `v1.02.3`, ...) must not match, and a pattern that lists the
visible items fails on the hidden text.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from trialground.families.checks import check_source
from trialground.families.draw import draw_tasks
from trialground.tasks.model import Split, Task, VerifierSpec
from trialground.tasks.sources import SourceRequest

SOLUTION = "pattern.txt"
_CHECK = check_source(Path(__file__).parent, "check_regex.py")
WORDS = ("server", "request", "user", "sent", "from", "at", "on", "the", "backup", "node", "report", "was",
         "seen", "with", "and", "logged", "note", "ticket", "host", "owner", "changed", "color",
         "release")  # fmt: skip
DOMAINS = ("example.org", "corp.example.com", "mail.test.io", "acme.net")
LOCALS = ("ana", "bo.smith", "ops-team", "j_doe42", "eve+alerts", "finn.o", "gia", "hal9000", "ines.l")
OCTET = r"(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)"
NUM = r"(?:0|[1-9]\d*)"
Make = Callable[[random.Random], str]


@dataclass(frozen=True)
class Kind:
    key: str
    text: str  # the exact definition the prompt gives
    reference: str  # the reference pattern
    valid: Make
    near_misses: tuple[Make, ...]


def octet(rng: random.Random) -> str:
    return str(rng.choice((rng.randint(0, 9), rng.randint(10, 99), rng.randint(100, 255), 255, 0)))


def kind_of(rng: random.Random) -> Kind:
    pick = rng.randrange(6)
    if pick == 0:
        return Kind(
            "ipv4",
            "IPv4 addresses: four decimal numbers from 0 to 255 joined by dots, without leading zeros (0 "
            "itself is fine), not directly preceded or followed by a digit or a dot",
            rf"(?<![\d.]){OCTET}(?:\.{OCTET}){{3}}(?![\d.])",
            lambda r: ".".join(octet(r) for _ in range(4)),
            (
                lambda r: f"{r.randint(256, 999)}.{octet(r)}.{octet(r)}.{octet(r)}",
                lambda r: f"{octet(r)}.{octet(r)}.{octet(r)}",
                lambda r: ".".join(octet(r) for _ in range(5)),
                lambda r: f"{octet(r)}.0{r.randint(1, 9)}.{octet(r)}.{octet(r)}",
            ),
        )
    if pick == 1:
        return Kind(
            "date",
            "ISO dates YYYY-MM-DD: four digits, a month 01-12 and a day 01-31 (no calendar check), each part "
            "with exactly those digits, not directly preceded or followed by a digit or a hyphen",
            r"(?<![\d-])\d{4}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12]\d|3[01])(?![\d-])",
            lambda r: f"{r.randint(1990, 2030)}-{r.randint(1, 12):02d}-{r.randint(1, 31):02d}",
            (
                lambda r: f"{r.randint(1990, 2030)}-{r.choice(('00', '13', '19', '20'))}-1{r.randint(0, 9)}",
                lambda r: f"{r.randint(1990, 2030)}-{r.randint(1, 12):02d}-{r.choice((32, 40, 0))}",
                lambda r: f"{r.randint(1990, 2030)}-{r.randint(1, 9)}-{r.randint(10, 28)}",
                lambda r: f"{r.randint(10000, 99999)}-{r.randint(1, 12):02d}-{r.randint(10, 28)}",
                lambda r: (
                    f"{r.randint(1990, 2030)}-{r.randint(1, 12):02d}-{r.randint(10, 28)}{r.randint(0, 9)}"
                ),
            ),
        )
    if pick == 2:
        domain = rng.choice(DOMAINS)
        escaped = domain.replace(".", r"\.")
        return Kind(
            f"email:{domain}",
            f"e-mail addresses at exactly the domain {domain}: a local part of letters, digits and `._+-`, "
            f"then `@{domain}`, not directly preceded by a local-part character and not followed by a "
            "letter, digit, dot or hyphen (so no subdomains and no longer names)",
            rf"(?<![\w.+-])[\w.+-]+@{escaped}(?![\w.-])",
            lambda r: f"{r.choice(LOCALS)}@{domain}",
            (
                lambda r: f"{r.choice(LOCALS)}@sub.{domain}",
                lambda r: f"{r.choice(LOCALS)}@{domain}.evil",
                lambda r: f"{r.choice(LOCALS)}@{domain}x",
                lambda r: f"{r.choice(LOCALS)}@{r.choice([d for d in DOMAINS if d != domain])}",
            ),
        )
    if pick == 3:
        return Kind(
            "color",
            "CSS hex colours: `#` and then exactly 3 or exactly 6 hexadecimal digits (either case), not "
            "directly followed by a letter or digit",
            r"#(?:[0-9a-fA-F]{6}|[0-9a-fA-F]{3})(?![0-9A-Za-z])",
            lambda r: "#" + "".join(r.choice("0123456789abcdefABCDEF") for _ in range(r.choice((3, 6)))),
            (
                lambda r: "#" + "".join(r.choice("0123456789abcdef") for _ in range(r.choice((4, 5, 8)))),
                lambda r: "#" + "".join(r.choice("ghijkz") for _ in range(3)),
                lambda r: f"#{r.randint(10, 99)}g",
            ),
        )
    if pick == 4:
        return Kind(
            "time",
            "24-hour times HH:MM or HH:MM:SS: hours 00-23, minutes and seconds 00-59, always two digits "
            "each, not directly preceded or followed by a digit or a colon",
            r"(?<![\d:])(?:[01]\d|2[0-3]):[0-5]\d(?::[0-5]\d)?(?![\d:])",
            lambda r: (
                f"{r.randint(0, 23):02d}:{r.randint(0, 59):02d}"
                + (f":{r.randint(0, 59):02d}" if r.random() < 0.5 else "")
            ),
            (
                lambda r: f"{r.randint(24, 29)}:{r.randint(0, 59):02d}",
                lambda r: f"{r.randint(0, 23):02d}:{r.randint(60, 99)}",
                lambda r: f"{r.randint(1, 9)}:{r.randint(0, 59):02d}",
                lambda r: f"{r.randint(0, 23):02d}:{r.randint(0, 59):02d}:{r.randint(60, 99)}",
                lambda r: f"{r.randint(100, 199)}:{r.randint(0, 59):02d}",
            ),
        )
    return Kind(
        "version",
        "version tags `v` + MAJOR.MINOR.PATCH: three decimal numbers without leading zeros (0 itself is "
        "fine), with a lower-case `v` not directly preceded by a letter or digit, and the whole not "
        "directly followed by a digit, a dot or a letter",
        rf"(?<![A-Za-z0-9])v{NUM}\.{NUM}\.{NUM}(?![\d.A-Za-z])",
        lambda r: "v" + ".".join(str(r.choice((0, r.randint(1, 9), r.randint(10, 40)))) for _ in range(3)),
        (
            lambda r: f"v{r.randint(0, 9)}.{r.randint(0, 9)}",
            lambda r: f"v{r.randint(0, 9)}.0{r.randint(1, 9)}.{r.randint(0, 9)}",
            lambda r: f"v{r.randint(0, 9)}.{r.randint(0, 9)}.{r.randint(0, 9)}.{r.randint(0, 9)}",
            lambda r: f"v{r.randint(0, 9)}.{r.randint(0, 9)}.{r.randint(0, 9)}rc",
            lambda r: f"dev{r.randint(0, 9)}.{r.randint(0, 9)}.{r.randint(0, 9)}",
        ),
    )


def document(kind: Kind, rng: random.Random) -> tuple[str, list[str]]:
    """Filler lines with the kind's items and near misses planted; the text and the items in order."""
    lines, items = [], []
    for _ in range(rng.randint(20, 40)):
        parts = []
        for _ in range(rng.randint(3, 9)):
            roll = rng.random()
            if roll < 0.18:
                token = kind.valid(rng)
                items.append(token)
            elif roll < 0.36:
                token = rng.choice(kind.near_misses)(rng)
            else:
                token = rng.choice(WORDS)
            if roll < 0.36 and rng.random() < 0.2:
                token = f"({token})"
            parts.append(token + rng.choice(("", "", "", ",", ";")))
        lines.append(" ".join(parts))
    return "\n".join(lines) + "\n", items


def make_task(kind: Kind, data_seed: int, split: Split) -> Task:
    text, items = document(kind, random.Random(data_seed))
    hidden, hidden_items = document(kind, random.Random(data_seed ^ 0x5EED))
    spec = {"solution": SOLUTION, "text": text, "want": items, "hidden_text": hidden,
            "hidden_want": hidden_items, "timeout_s": 10}  # fmt: skip
    check = _CHECK.replace('SPEC_JSON = "{}"', f"SPEC_JSON = {json.dumps(json.dumps(spec))}", 1)
    prompt = (
        f"text.txt in your workspace is a text with items of one kind among other words and near misses. "
        f"Write ONE Python regular expression in {SOLUTION} whose matches (re.finditer, no flags, the whole "
        f"match) are exactly, in order, the {kind.text}.\n\nOnly the pattern goes in {SOLUTION} (one line). "
        "It is also applied to another text of the same kind, so describe the items, do not list them."
    )
    return Task(
        domain="regex",
        prompt=prompt,
        files={"text.txt": text, SOLUTION: ""},
        hidden_checks={"check_regex.py": check},
        reference=kind.reference + "\n",
        verifier=VerifierSpec(
            kind="check_program", params={"solution_path": SOLUTION, "check_timeout_s": 60}
        ),
        split=split,
        metadata={"family": "regex", "template": kind.key.split(":")[0], "key": kind.key},
    )


def regex_tasks(n: int, seed: int, split: Split) -> list[Task]:
    """`n` tasks of `split`, deterministic in the arguments; an instance is its kind and its texts."""

    def instance(rng: random.Random) -> tuple[str, Callable[[], Task]]:
        kind = kind_of(rng)
        data_seed = rng.getrandbits(48)
        return f"{kind.key}|{data_seed}", lambda: make_task(kind, data_seed, split)

    return draw_tasks("regex", n, seed, split, instance)


def load(request: SourceRequest) -> list[Task]:
    assert request.n is not None and request.split is not None
    return regex_tasks(request.n, request.seed, request.split)
