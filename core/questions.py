"""Plain ``interrupt(value)`` questions: what any interrupt that is not the HITL middleware's
asks, and the answer it takes.

A question is stored on its action request under ``"interrupt"`` (the graph's interrupt id, the
value as JSON, the node and namespace it came from), so every reader of a request (pages, the
CLI, the API, notifications, Vigilator) meets one shape. A value may say what answer it expects
with a JSON schema under :data:`SCHEMA_KEY`; ``{"type": "boolean"}`` asks a yes/no. The answer
is the decision ``{"type": "answer", "value": ...}`` and is what ``interrupt()`` returns.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from core.errors import UserError
from core.limits import check_value
from core.schemas import validate

SCHEMA_KEY = "answer_schema"  # documented in docs/any-interrupt.md
TEXT_KEYS = ("question", "message", "text", "prompt")  # a value's headline, when it has one


@dataclass(frozen=True)
class Question:
    """One pending plain interrupt."""

    id: str  # LangGraph's interrupt id (32 hex): the key of ``Command(resume={id: ...})``
    value: Any
    node: str = ""
    namespace: tuple[str, ...] = ()

    @classmethod
    def parse(cls, raw: Any) -> Question:
        if not isinstance(raw, Mapping) or not isinstance(raw.get("id"), str):
            raise UserError("a question must carry its interrupt id")
        return cls(
            raw["id"], raw.get("value"), str(raw.get("node") or ""), tuple(raw.get("ns") or ())
        )

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "value": self.value, "node": self.node, "ns": list(self.namespace)}

    @property
    def schema(self) -> dict[str, Any] | None:
        """The JSON schema the answer must satisfy, if the value declares one."""
        if isinstance(self.value, Mapping) and isinstance(self.value.get(SCHEMA_KEY), Mapping):
            return dict(self.value[SCHEMA_KEY])
        return None

    @property
    def kind(self) -> str:
        """How the answer is asked for: ``yesno``, ``text`` or ``json``."""
        expected = (self.schema or {}).get("type")
        if expected == "boolean":
            return "yesno"
        if expected in (None, "string"):
            return "text"
        return "json"

    @property
    def text(self) -> str:
        """The question in one piece of text: a string value, or its headline field."""
        if isinstance(self.value, str):
            return self.value
        if isinstance(self.value, Mapping):
            for key in TEXT_KEYS:
                if isinstance(self.value.get(key), str):
                    return str(self.value[key])
        return ""

    def fields(self) -> list[tuple[str, str]]:
        """An object value as labelled fields (label, value as text), the schema left out."""
        if not isinstance(self.value, Mapping):
            return [] if isinstance(self.value, str) else [("value", _shown(self.value))]
        headline = next((k for k in TEXT_KEYS if isinstance(self.value.get(k), str)), None)
        return [
            (str(k).replace("_", " "), _shown(v))
            for k, v in self.value.items()
            if k not in (SCHEMA_KEY, headline)
        ]

    def where(self) -> str:
        return "/".join(self.namespace) or self.node

    def describe(self) -> str:
        """One line: the node and what it asks."""
        shown = self.text or json.dumps(self.value, ensure_ascii=False)
        return f"{self.where() or 'interrupt'}: {shown}"

    def answer(self, value: Any, where: str) -> Any:
        """``value`` as the answer ``interrupt()`` will return, or ``UserError`` saying why not
        (not storable JSON, or not what the declared schema asks)."""
        check_value(value, where)
        if self.kind == "yesno" and isinstance(value, str):
            value = _yes_no(value, where)
        schema = self.schema
        if schema is not None:
            import jsonschema

            try:
                validate(value, schema)
            except jsonschema.ValidationError as exc:
                at = ".".join(str(p) for p in exc.absolute_path) or "answer"
                raise UserError(f"{where}: {at}: {exc.message}") from None
            except jsonschema.SchemaError:
                raise UserError(f"{where}: the interrupt's {SCHEMA_KEY} is not a schema") from None
        return value

    def from_text(self, text: str, where: str) -> Any:
        """A free-text answer (a ``respond`` message, a page's text box): text, unless the
        question expects JSON or a yes/no and the text is that."""
        if self.kind == "text":
            return text
        if self.kind == "yesno":
            return _yes_no(text, where)
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            return text  # the schema check names what is wrong


def _yes_no(text: str, where: str) -> bool:
    word = text.strip().lower()
    if word in ("yes", "y", "true"):
        return True
    if word in ("no", "n", "false"):
        return False
    raise UserError(f"{where}: answer yes or no")


def _shown(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def storable(value: Any, node: str) -> Any:
    """The interrupt value as JSON, or a ``UserError`` naming the node and what to change."""
    try:
        text = json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise UserError(
            f"node {node or '?'} called interrupt() with a value that is not JSON ({exc}); "
            "pass plain JSON (text, numbers, true/false, lists, objects with text keys)"
        ) from None
    return json.loads(text)
