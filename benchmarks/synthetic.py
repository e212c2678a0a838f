"""Synthetic memory for the search benchmark: people with histories, chat about them,
clustered unit vectors (no model needed). Deterministic for a seed."""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np


def _words(text: str, sep: str | None = None) -> tuple[str, ...]:
    return tuple(w.strip() for w in text.split(sep))


FIRST = _words(
    "Alice Bruno Chloe Daniel Elena Farid Grace Hiro Ines Jonas Kira Liam Maya Noah Olga Pablo "
    "Quinn Rosa Sven Tara Umar Vera Wen Ximena Yusuf Zoe Amara Boris Carmen Dmitri Esme Felix "
    "Greta Hamid Ingrid Jamal Keiko Lars Mina Nils Oona Priya Rafael Sana Tomas Ulla Viktor "
    "Wanda Yara Zane Aiko Bernd Celine Diego Emil Fatima Gustav Hana Ivan Julia Kofi Leila Marco "
    "Nadia Oskar Petra Rami Selin Theo Uma Valentin Willa Xavier Yvonne Zara"
)
LAST = _words(
    "Moreno Tanaka Okafor Lindqvist Novak Haddad Schmidt Rossi Kowalski Fischer Nakamura Silva "
    "Dubois Jensen Petrov Garcia Larsen Costa Yilmaz Mendes Weber Ivanova Bauer Santos Kim Berg "
    "Horvat Laine Moretti Aziz Varga Keller Sato Fontaine Nilsen Castro Richter Popescu Dahl "
    "Lopes Ahmed Brandt Ortiz Eriksen Klein Romero Hoffmann Sousa Wolff Quist Marsh Ito Lund"
)
CITIES = _words(
    "Lisbon Porto Madrid Valencia Lyon Marseille Zurich Geneva Vienna Prague Krakow Warsaw "
    "Berlin Hamburg Munich Cologne Amsterdam Utrecht Antwerp Ghent Copenhagen Aarhus Oslo "
    "Bergen Stockholm Gothenburg Helsinki Tallinn Riga Vilnius Dublin Cork Edinburgh Glasgow "
    "Manchester Leeds Bristol Toronto Montreal Vancouver Boston Denver Austin Seattle Chicago "
    "Osaka Kyoto Seoul Busan Taipei Singapore Sydney Melbourne Auckland Nairobi Lagos Accra"
)
COMPANY_A = _words(
    "Acme Globex Initech Umbrella Hooli Vandelay Stark Wayne Tyrell Cyberdyne Soylent Aperture "
    "Massive Blue Northwind Contoso Fabrikam Litware Tailspin Wingtip Proseware Adventure "
    "Lucerne Margie Alpine Coho Fourth Humongous Trey Wide"
)
COMPANY_B = _words(
    "Analytics Robotics Logistics Foods Health Energy Labs Systems Capital Media Bank Studios "
    "Networks Pharma Motors Airlines Insurance Retail Games Security"
)
PRODUCT_ADJ = _words("Swift Quiet Bright Solid Nimble Clear Rapid Smart Open Prime Cosmic Urban")
PRODUCT_NOUN = _words("Notes Pay Board Desk Mail Chat Drive Sheets Maps Vault Radar Pulse Atlas")
TOPICS = _words(
    "hiking climbing sailing chess jazz opera pottery baking cycling running yoga photography "
    "gardening astronomy birdwatching knitting surfing skiing tennis football basketball "
    "poetry painting woodworking podcasts sushi ramen tapas espresso wine cheese vinyl "
    "guitar piano violin drums karaoke board-games crosswords sudoku rowing kayaking "
    "fishing camping archery fencing judo boxing dancing salsa tango theatre cinema anime"
)
TITLES = _words(
    "data engineer|product manager|nurse|teacher|sales lead|designer|accountant|architect|"
    "chef|lawyer|researcher|support agent|site reliability engineer|recruiter|analyst|"
    "marketing director|pharmacist|pilot|electrician|translator",
    "|",
)
PLANS = ("free", "starter", "basic", "plus", "pro", "team", "business", "enterprise")
FILLER = ("Thanks, that helps a lot.", "Can you remind me about this next week?",
          "Sounds good, let's keep that in mind.", "I'm not sure, let me check my notes.",
          "Great, I'll follow up tomorrow morning.", "That makes sense to me.")  # fmt: skip


@dataclass(frozen=True)
class Predicate:
    name: str
    cardinality: str  # 'one' (a new object supersedes) or 'many'
    objects: str  # person, company, city, product, topic, title, plan
    entity: bool  # the object is an entity (edges) or a literal
    content: str  # the fact's sentence
    chat: str  # a chat turn that mentions it
    question: str  # a search query about it


PREDICATES: tuple[Predicate, ...] = (
    Predicate("works_at", "one", "company", True, "{s} works at {o}.",
              "Did you hear that {s} joined {o}?", "Where does {s} work now?"),
    Predicate("lives_in", "one", "city", True, "{s} lives in {o}.",
              "{s} told me they moved to {o} recently.", "Which city does {s} live in?"),
    Predicate("title", "one", "title", False, "{s}'s job title is {o}.",
              "{s} got a new role as {o}.", "What is {s}'s job title?"),
    Predicate("plan", "one", "plan", False, "{s} is on the {o} plan.",
              "{s} switched their subscription to the {o} plan.", "Which plan is {s} on?"),
    Predicate("reports_to", "one", "person", True, "{s} reports to {o}.",
              "{s} has {o} as their new manager.", "Who is {s}'s manager?"),
    Predicate("likes", "many", "topic", False, "{s} likes {o}.",
              "{s} spent the whole weekend on {o} again.", "What does {s} enjoy doing?"),
    Predicate("knows", "many", "person", True, "{s} knows {o}.",
              "{s} and {o} met at a conference.", "Who does {s} know?"),
    Predicate("uses", "many", "product", True, "{s} uses {o}.",
              "{s} keeps all their work in {o}.", "Which tools does {s} use?"),
)  # fmt: skip
SPAN_START = datetime(2019, 1, 1, tzinfo=UTC)
SPAN_DAYS = 6 * 365  # histories run from 2019 to the end of 2024
MAX_VERSIONS = 6


def person(i: int) -> str:
    """The i-th distinct person name (first, optional middle initial, last)."""
    first, rest = FIRST[i % len(FIRST)], i // len(FIRST)
    last, initial = LAST[rest % len(LAST)], rest // len(LAST)
    if initial == 0:
        return f"{first} {last}"
    return f"{first} {chr(ord('A') + (initial - 1) % 26)}{(initial - 1) // 26 or ''}. {last}"


def _object(rng: random.Random, kind: str, people: int) -> str:
    if kind == "person":
        return person(rng.randrange(people))
    if kind == "company":
        return f"{rng.choice(COMPANY_A)} {rng.choice(COMPANY_B)}"
    if kind == "product":
        return f"{rng.choice(PRODUCT_ADJ)} {rng.choice(PRODUCT_NOUN)}"
    words = {"city": CITIES, "topic": TOPICS, "title": TITLES}
    return rng.choice(words.get(kind, PLANS))


def _instant(rng: random.Random) -> datetime:
    return SPAN_START + timedelta(seconds=rng.randrange(SPAN_DAYS * 86400))


@dataclass
class Project:
    """One project's synthetic content; subjects are people 0..subjects-1."""

    name: str
    facts: int
    episodes: int
    seed: str
    subjects: int = 0

    def fact_stream(self) -> list[dict[str, Any]]:
        """About `facts` facts (whole profiles), in world-time order, as assert_facts JSON."""
        rng = random.Random(f"{self.seed}/facts/{self.name}")
        out: list[dict[str, Any]] = []
        while len(out) < self.facts:
            out += self._profile(rng, self.subjects)
            self.subjects += 1
        out = out[: self.facts]
        out.sort(key=lambda f: f["valid_from"])
        return out

    def _profile(self, rng: random.Random, i: int) -> list[dict[str, Any]]:
        subject, facts = person(i), []
        people = max(self.subjects + 1, 50)
        for p in PREDICATES:
            if p.cardinality == "one":
                if rng.random() < 0.2:
                    continue
                n = 1
                while n < MAX_VERSIONS and rng.random() < 0.5:
                    n += 1  # 1 + geometric: mean about 2 versions
            else:
                n = rng.randrange(4)
            times = sorted(_instant(rng) for _ in range(n))
            used: set[str] = set()
            for t in times:
                obj = _object(rng, p.objects, people)
                if obj in used or obj == subject:
                    continue  # a repeat would be a skip, not a fact
                used.add(obj)
                facts.append(
                    {
                        "subject": subject,
                        "subject_type": "person",
                        "predicate": p.name,
                        "object": obj,
                        "object_type": "entity" if p.entity else "literal",
                        "content": p.content.format(s=subject, o=obj),
                        "valid_from": t.isoformat(),
                    }
                )
        return facts

    def sessions(self, size: int = 100) -> Iterator[tuple[str, list[dict[str, Any]]]]:
        """Chat sessions of `size` turns (the last one shorter), a minute apart."""
        rng = random.Random(f"{self.seed}/episodes/{self.name}")
        people = max(self.subjects, 50)
        for n, start in enumerate(range(0, self.episodes, size)):
            t0 = _instant(rng)
            turns = []
            for j in range(min(size, self.episodes - start)):
                p = rng.choice(PREDICATES)
                text = (
                    rng.choice(FILLER)
                    if rng.random() < 0.25
                    else p.chat.format(
                        s=person(rng.randrange(people)), o=_object(rng, p.objects, people)
                    )
                )
                turns.append(
                    {
                        "role": "user" if j % 2 == 0 else "assistant",
                        "content": text,
                        "occurred_at": (t0 + timedelta(minutes=j)).isoformat(),
                    }
                )
            yield f"chat-{n}", turns

    def queries(self, n: int, rng: random.Random) -> list[str]:
        people = max(self.subjects, 1)
        return [
            rng.choice(PREDICATES).question.format(s=person(rng.randrange(people)))
            for _ in range(n)
        ]


class Clusters:
    """Unit vectors around `count` random unit centres (cosine to the centre ~0.75)."""

    def __init__(self, dim: int, count: int, seed: int, noise: float = 0.045) -> None:
        self.rng = np.random.default_rng(seed)
        centres = self.rng.standard_normal((count, dim)).astype(np.float32)
        self.centres = centres / np.linalg.norm(centres, axis=1, keepdims=True)
        self.noise = noise

    def sample(self, n: int) -> np.ndarray:
        picks = self.rng.integers(0, len(self.centres), n)
        noise = self.rng.standard_normal((n, self.centres.shape[1])).astype(np.float32)
        v = self.centres[picks] + self.noise * noise
        out: np.ndarray = v / np.linalg.norm(v, axis=1, keepdims=True)
        return out


def split(total: int, shares: list[float]) -> list[int]:
    """total split by shares (the first takes the rounding remainder)."""
    parts = [int(total * s) for s in shares]
    parts[0] += total - sum(parts)
    return parts
