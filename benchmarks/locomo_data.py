"""Reading a LoCoMo file (the `locomo10.json` format): turns, questions, observations.

Pure parsing, no database: every choice about how a conversation becomes messages
(who is `user`, what the content says, when each turn occurred) is made here, once.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

CATEGORIES: dict[int, str] = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
DATE_FORMAT = "%I:%M %p on %d %B, %Y"  # "1:56 pm on 8 May, 2023"
# Evidence ids are "D<session>:<turn>"; a few in the wild read "D:11:26" or hold two
# ids in one string ("D8:6; D9:17"), so ids are found, not matched whole.
_DIA_ID = re.compile(r"D:?(\d+):(\d+)")
_SESSION_KEY = re.compile(r"session_(\d+)")


@dataclass(frozen=True)
class Turn:
    dia_id: str
    speaker: str
    role: str  # speaker_a -> user, speaker_b -> assistant
    content: str  # "<speaker>: <text>", plus the caption of a shared image
    occurred_at: datetime


@dataclass(frozen=True)
class Session:
    number: int
    started_at: datetime
    turns: list[Turn]


@dataclass(frozen=True)
class Question:
    index: int  # position in the sample's qa list
    text: str
    category: int
    evidence: frozenset[str]  # dia ids that exist in the conversation


@dataclass(frozen=True)
class Observation:
    speaker: str
    text: str
    evidence: tuple[str, ...]
    session: int
    valid_from: datetime


@dataclass(frozen=True)
class Conversation:
    sample_id: str
    speakers: tuple[str, str]
    sessions: list[Session]
    questions: list[Question]
    observations: list[Observation]
    skipped_questions: int  # categories 1-4 whose evidence names no turn of the conversation

    @property
    def turns(self) -> list[Turn]:
        return [t for s in self.sessions for t in s.turns]


def parse_date(text: str) -> datetime:
    """LoCoMo's session stamp as an aware UTC datetime (the data has no zone)."""
    return datetime.strptime(text.strip(), DATE_FORMAT).replace(tzinfo=UTC)


def dia_ids(raw: Any) -> list[str]:
    """Every dialog id in an evidence entry (a string or a list of strings)."""
    items = raw if isinstance(raw, list) else [raw]
    return [f"D{m[0]}:{m[1]}" for item in items for m in _DIA_ID.findall(str(item))]


def _content(speaker: str, raw: dict[str, Any], with_speaker: bool) -> str:
    # Two people talk, and a message's role can only say user or assistant: by default
    # the speaker's name goes into the content, as a transcript would write it.  A
    # shared photo reaches the memory as its caption (LoCoMo's blip_caption).
    text = str(raw.get("text", "")).strip()
    if with_speaker:
        text = f"{speaker}: {text}"
    if raw.get("blip_caption"):
        text += f" [shares a photo: {raw['blip_caption'].strip()}]"
    return text


def _sessions(conv: dict[str, Any], with_speaker: bool) -> list[Session]:
    speaker_a = conv["speaker_a"]
    numbers = sorted(
        int(m[1])
        for key, value in conv.items()
        if (m := _SESSION_KEY.fullmatch(key)) and isinstance(value, list) and value
    )
    sessions = []
    for n in numbers:
        started = parse_date(conv[f"session_{n}_date_time"])
        turns = [
            Turn(
                dia_id=raw["dia_id"],
                speaker=raw["speaker"],
                role="user" if raw["speaker"] == speaker_a else "assistant",
                content=_content(raw["speaker"], raw, with_speaker),
                # Turns of a session get increasing seconds from its stamp.
                occurred_at=started + timedelta(seconds=i),
            )
            for i, raw in enumerate(conv[f"session_{n}"])
        ]
        sessions.append(Session(n, started, turns))
    return sessions


def _observations(sample: dict[str, Any], starts: dict[int, datetime]) -> list[Observation]:
    out = []
    for key, by_speaker in (sample.get("observation") or {}).items():
        m = re.fullmatch(r"session_(\d+)_observation", key)
        if not m or int(m[1]) not in starts or not isinstance(by_speaker, dict):
            continue
        n = int(m[1])
        for speaker, items in by_speaker.items():
            for item in items:
                text, evidence = (item[0], item[1]) if isinstance(item, list) else (item, [])
                if str(text).strip():
                    out.append(
                        Observation(
                            speaker, str(text).strip(), tuple(dia_ids(evidence)), n, starts[n]
                        )
                    )
    return out


def parse_sample(sample: dict[str, Any], with_speaker: bool = True) -> Conversation:
    conv = sample["conversation"]
    sessions = _sessions(conv, with_speaker)
    known = {t.dia_id for s in sessions for t in s.turns}
    questions, skipped = [], 0
    for i, qa in enumerate(sample.get("qa", [])):
        category = int(qa.get("category", 0))
        if category not in CATEGORIES:
            continue  # 5 (adversarial) has no answer in the conversation by design
        evidence = frozenset(d for d in dia_ids(qa.get("evidence", [])) if d in known)
        if not evidence:
            skipped += 1
            continue
        questions.append(Question(i, str(qa["question"]), category, evidence))
    starts = {s.number: s.started_at for s in sessions}
    return Conversation(
        sample_id=str(sample.get("sample_id", "")),
        speakers=(conv["speaker_a"], conv["speaker_b"]),
        sessions=sessions,
        questions=questions,
        observations=_observations(sample, starts),
        skipped_questions=skipped,
    )


def load(path: Path, limit: int | None = None, with_speaker: bool = True) -> list[Conversation]:
    samples = json.loads(path.read_text())
    if limit is not None:
        samples = samples[:limit]
    return [parse_sample(s, with_speaker) for s in samples]
