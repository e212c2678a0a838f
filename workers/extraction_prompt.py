"""What the extraction call asks: the system prompt and the answer's JSON schema, both
built from the project's extraction schema when it has one (the context's "schema").

The prompt hash is the sha256 of the system prompt and the response schema actually
sent, so a stored answer can be traced to what produced it.
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from dataclasses import dataclass
from typing import Any

OBJECT_TYPES = ("entity", "literal", "date", "number")

BASE_PROMPT = """\
You turn one message of a conversation into long-term memory for an AI agent.
The user message is JSON: `episode` (the message, with its occurred_at), \
`recent_turns` (earlier messages, context only), `known_facts` (what memory holds \
now about the entities mentioned, each with a fact_id) and `predicates` (declared \
relations with their cardinality). Extract only what `episode` states or implies.

Answer with one JSON object in the given schema, and nothing else:
- entities: named people, organizations, products, places... with a type, a short \
summary and aliases (other names used for the same thing).
- facts: subject-predicate-object statements. subject (and object when \
object_type is "entity") are entity names; predicates are short snake_case \
relations (reuse a declared predicate when one fits); object_type is "entity", \
"literal", "date" (an ISO 8601 date) or "number" (digits only); content is one \
self-contained sentence; confidence is a number from 0 to 1.
- Time: valid_from / valid_to are ISO 8601 timestamps, set only when the text says \
when a fact started or ended (resolve relative dates like "last March" against \
the episode's occurred_at); otherwise null, and the fact starts at the episode.
- A predicate declared with cardinality "one" has one value per subject at a time: \
state the new value as a fact; memory closes the old value itself (do not list it \
as a contradiction).
- contradictions: facts from known_facts that this message shows are no longer \
true and that no new fact replaces. Cite only fact_id values from known_facts; \
never invent one.
- notes: preferences (kind "preference") and summaries (kind "summary") that are \
not subject-predicate-object facts.
Empty lists are fine. Never repeat known facts that did not change."""


def normalize(text: str) -> str:
    """Names as the database compares them (memory.normalize_text): NFKC, case folded,
    punctuation and whitespace runs as one space."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    return re.sub(r"[\W_]+", " ", folded).strip()


@dataclass(frozen=True)
class ProjectSchema:
    """The project's extraction schema (context "schema"), or an empty one."""

    version: int | None = None
    entity_types: tuple[dict[str, Any], ...] = ()
    predicates: tuple[dict[str, Any], ...] = ()
    labels: tuple[dict[str, Any], ...] = ()
    fields: dict[str, Any] | None = None
    allow_other_predicates: bool = True
    allow_other_entity_types: bool = True

    @classmethod
    def from_context(cls, context: dict[str, Any]) -> ProjectSchema:
        doc = context.get("schema")
        if not isinstance(doc, dict):
            return cls()
        fields = doc.get("fields")
        return cls(
            version=doc.get("version"),
            entity_types=tuple(e for e in doc.get("entity_types") or [] if isinstance(e, dict)),
            predicates=tuple(p for p in doc.get("predicates") or [] if isinstance(p, dict)),
            labels=tuple(x for x in doc.get("labels") or [] if isinstance(x, dict)),
            fields=fields if isinstance(fields, dict) else None,
            allow_other_predicates=doc.get("allow_other_predicates", True) is not False,
            allow_other_entity_types=doc.get("allow_other_entity_types", True) is not False,
        )

    @property
    def entity_type_names(self) -> list[str]:
        return [str(e["name"]) for e in self.entity_types if e.get("name")]

    @property
    def predicate_names(self) -> list[str]:
        return [str(p["name"]) for p in self.predicates if p.get("name")]

    @property
    def label_names(self) -> list[str]:
        return [str(x["name"]) for x in self.labels if x.get("name")]

    def predicate(self, name: str) -> dict[str, Any] | None:
        """The declared predicate of that name (compared as memory.normalize_text does)."""
        key = normalize(name)
        return next((p for p in self.predicates if normalize(str(p.get("name"))) == key), None)

    @property
    def closed_entity_types(self) -> bool:
        """Only the declared entity types are accepted."""
        return not self.allow_other_entity_types and bool(self.entity_type_names)

    @property
    def closed_predicates(self) -> bool:
        """Only the declared predicates are accepted."""
        return not self.allow_other_predicates and bool(self.predicate_names)


def _line(item: dict[str, Any], extra: str = "") -> str:
    description = str(item.get("description") or "").strip()
    return f"- {item['name']}{extra}" + (f": {description}" if description else "")


def system_prompt(schema: ProjectSchema) -> str:
    parts = [BASE_PROMPT]
    if schema.entity_types:
        rule = (
            "Use only these entity types:"
            if schema.closed_entity_types
            else "Entity types of this project (prefer them):"
        )
        parts.append("\n".join([rule, *(_line(e) for e in schema.entity_types if e.get("name"))]))
    if schema.predicates:
        rule = (
            "Use only these predicates:"
            if schema.closed_predicates
            else "Predicates of this project (reuse them when one fits):"
        )
        lines = [
            _line(
                p,
                f" (cardinality {p.get('cardinality') or 'many'}, "
                f"object_type {p.get('object_type') or 'literal'})",
            )
            for p in schema.predicates
            if p.get("name")
        ]
        parts.append("\n".join([rule, *lines]))
    if schema.label_names:
        parts.append(
            "\n".join(
                [
                    "classification: the labels below that apply to the episode "
                    "(none, one or several; only these names):",
                    *(_line(x) for x in schema.labels if x.get("name")),
                ]
            )
        )
    if schema.fields is not None:
        parts.append(
            "fields: an object filled from the episode following this JSON Schema "
            "(leave out what the episode does not say):\n"
            + json.dumps(schema.fields, ensure_ascii=False, sort_keys=True)
        )
    return "\n\n".join(parts)


def _nullable(kind: str, description: str) -> dict[str, Any]:
    return {"type": [kind, "null"], "description": description}


def _object(properties: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }


def _strict_compatible(node: Any) -> bool:
    """Whether a JSON Schema meets strict structured output's rules (every object
    closed, with all its properties required)."""
    if isinstance(node, list):
        return all(_strict_compatible(x) for x in node)
    if not isinstance(node, dict):
        return True
    if node.get("type") == "object" or "properties" in node:
        props = node.get("properties") or {}
        if node.get("additionalProperties") is not False or set(node.get("required") or []) != set(
            props
        ):
            return False
    return all(_strict_compatible(v) for v in node.values())


def response_schema(schema: ProjectSchema) -> tuple[dict[str, Any], bool]:
    """The answer's JSON schema, and whether it can be sent as strict."""
    entity_type: dict[str, Any] = _nullable("string", "person, organization, product, place, ...")
    if schema.closed_entity_types:
        entity_type = {"type": ["string", "null"], "enum": [*schema.entity_type_names, None]}
    predicate: dict[str, Any] = {
        "type": "string",
        "description": "Short snake_case relation; reuse a declared one.",
    }
    if schema.closed_predicates:
        predicate = {"type": "string", "enum": schema.predicate_names}
    entity = _object(
        {
            "name": {"type": "string", "description": "The entity's most specific name."},
            "type": entity_type,
            "summary": _nullable("string", "One short sentence about it."),
            "aliases": {"type": "array", "items": {"type": "string"}},
        }
    )
    fact = _object(
        {
            "subject": {"type": "string", "description": "Entity name the fact is about."},
            "predicate": predicate,
            "object": {"type": "string", "description": "Entity name or value."},
            "object_type": {"type": ["string", "null"], "enum": [*OBJECT_TYPES, None]},
            "content": {"type": "string", "description": "The fact as one sentence."},
            "confidence": {"type": "number", "description": "0 to 1."},
            "valid_from": _nullable("string", "ISO 8601; only if the text says when."),
            "valid_to": _nullable("string", "ISO 8601; only if the text says when."),
        }
    )
    contradiction = _object(
        {
            "fact_id": {"type": "string", "description": "A fact_id from known_facts."},
            "reason": {"type": "string"},
        }
    )
    note = _object(
        {
            "kind": {"type": "string", "enum": ["preference", "summary"]},
            "subject": _nullable("string", "Entity name it is about, if any."),
            "content": {"type": "string"},
        }
    )
    properties: dict[str, Any] = {
        "entities": {"type": "array", "items": entity},
        "facts": {"type": "array", "items": fact},
        "contradictions": {"type": "array", "items": contradiction},
        "notes": {"type": "array", "items": note},
    }
    strict = True
    if schema.label_names:
        properties["classification"] = {
            "type": "array",
            "items": {"type": "string", "enum": schema.label_names},
        }
    if schema.fields is not None:
        properties["fields"] = schema.fields
        strict = _strict_compatible(schema.fields)
    return _object(properties), strict


@dataclass(frozen=True)
class Prompt:
    schema: ProjectSchema
    system: str
    response_schema: dict[str, Any]
    strict: bool

    def hash_for(self, system_sent: str) -> str:
        """sha256 of the system prompt and the response schema actually sent."""
        sent = json.dumps(
            {"system": system_sent, "response_schema": self.response_schema},
            ensure_ascii=False,
            sort_keys=True,
        )
        return hashlib.sha256(sent.encode()).hexdigest()


def build_prompt(context: dict[str, Any]) -> Prompt:
    schema = ProjectSchema.from_context(context)
    answer_schema, strict = response_schema(schema)
    return Prompt(schema, system_prompt(schema), answer_schema, strict)
