"""A reviewer's decision on one action as a typed value: :class:`Approve`, :class:`Edit`,
:class:`Reject`, :class:`Respond` or a question's :class:`Answer`, one union, :data:`Verdict`.

Every source that receives decisions on the wire (the API, a webhook, an inbox polled, the
inbox CLI's ``--decisions``) reads them once with :func:`read_answers`, so the decision path
past that edge never holds a ``dict``. What can be said without the request (the shape, the
fields each kind may carry, text that can be stored) is refused there; what needs the request
(one decision per action, the kinds it allows, an edit's tool, locked arguments and schema) is
refused by :func:`check_answers`, which the rule pipeline runs in its turn, so a halt or a
stale digest is still said before a malformed decision (``validate_answers`` is these two
steps, what a graph runs on its resume value). Past the claim the same values travel: a run's
stored approvals and the resume are read back with :func:`parse_stored`, and ``to_json`` gives
the middleware's wire shape back, unchanged.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from core.errors import UserError
from core.hitl import DECISION_TYPES, DecisionType, HitlRequest, validate_args
from core.limits import check_text, check_value

ANY_TYPE: tuple[DecisionType, ...] = (*DECISION_TYPES, "answer")


@dataclass(frozen=True)
class Approve:
    """Run the action as proposed."""

    kind: ClassVar[DecisionType] = "approve"
    approving: ClassVar[bool] = True  # something would run: quorum and separation of duties apply

    def to_json(self) -> dict[str, Any]:
        return {"type": "approve"}


@dataclass(frozen=True)
class Edit:
    """Run the action with these arguments. ``name`` is the tool the reviewer named (None:
    absent or not text); ``args`` None: absent or not an object. The request's rules refuse
    either (an edit keeps its tool; arguments are an object)."""

    args: dict[str, Any] | None
    name: str | None
    kind: ClassVar[DecisionType] = "edit"
    approving: ClassVar[bool] = True

    def to_json(self) -> dict[str, Any]:
        return {"type": "edit", "edited_action": {"name": self.name, "args": self.args}}


@dataclass(frozen=True)
class Reject:
    """Do not run the action; ``message`` (None: absent) tells the model why."""

    message: str | None = None
    kind: ClassVar[DecisionType] = "reject"
    approving: ClassVar[bool] = False

    def to_json(self) -> dict[str, Any]:
        return _with_message("reject", self.message)


@dataclass(frozen=True)
class Respond:
    """Do not run the action; answer the model with ``text`` instead (to a question: the
    answer given as text)."""

    text: str | None = None
    kind: ClassVar[DecisionType] = "respond"
    approving: ClassVar[bool] = False

    def to_json(self) -> dict[str, Any]:
        return _with_message("respond", self.text)


@dataclass(frozen=True)
class Answer:
    """What a plain interrupt's ``interrupt()`` returns."""

    value: Any
    kind: ClassVar[DecisionType] = "answer"
    approving: ClassVar[bool] = True

    def to_json(self) -> dict[str, Any]:
        return {"type": "answer", "value": self.value}


Verdict = Approve | Edit | Reject | Respond | Answer
VERDICTS = (Approve, Edit, Reject, Respond, Answer)

# What each kind of decision may carry; anything else would ride into the audit trail.
_FIELDS = {
    "approve": {"type"},
    "edit": {"type", "edited_action"},
    "reject": {"type", "message"},
    "respond": {"type", "message"},
}


def _with_message(kind: str, message: str | None) -> dict[str, Any]:
    return {"type": kind} if message is None else {"type": kind, "message": message}


def _only(data: Mapping[str, Any], allowed: set[str], where: str) -> None:
    extra = sorted(str(k) for k in data if k not in allowed)
    if extra:
        raise UserError(f"{where} has fields it may not carry: {', '.join(extra)[:200]}")


def read_answers(raw: Any) -> list[Verdict | None]:
    """The wire's ``{"decisions": [...]}`` (or its list) as typed decisions, ``None`` leaving
    an action unanswered; a ``UserError`` names what cannot be a decision at all."""
    if isinstance(raw, Sequence) and not isinstance(raw, str):
        raw = {"decisions": list(raw)}
    if not isinstance(raw, Mapping) or not isinstance(raw.get("decisions"), list):
        raise UserError('a decision must be {"decisions": [...]}')
    check_value(raw, "the decision")
    return [None if d is None else _read(d, i) for i, d in enumerate(raw["decisions"])]


def _read(data: Any, i: int) -> Verdict:
    kind = data.get("type") if isinstance(data, Mapping) else None
    if kind == "answer":
        if "value" not in data:
            raise UserError(f'answer {i + 1}: a question takes {{"type": "answer", "value": ...}}')
        return Answer(data["value"])
    if kind not in DECISION_TYPES:
        raise UserError(f"decision {i + 1}: type must be one of {', '.join(DECISION_TYPES)}")
    _only(data, _FIELDS[kind], f"decision {i + 1} ({kind})")
    if kind == "approve":
        return Approve()
    if kind == "edit":
        edited = data.get("edited_action")
        if not isinstance(edited, Mapping):
            return Edit(None, None)
        _only(edited, {"name", "args"}, f"decision {i + 1}: edited_action")
        name, args = edited.get("name"), edited.get("args")
        return Edit(dict(args) if isinstance(args, Mapping) else None, _text(name))
    message = data.get("message")
    if message is not None and not isinstance(message, str):
        raise UserError(f"decision {i + 1}: message must be text")
    check_text(message or "", f"decision {i + 1}: message")
    return Reject(message) if kind == "reject" else Respond(message)


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def parse_stored(raw: Any) -> Verdict:
    """One decision as it was stored or sent after :func:`read_answers` accepted it (a run's
    approvals, a resume value): read back without judging it again."""
    if not isinstance(raw, Mapping):
        raise UserError("a decision must be a JSON object")
    data = raw
    kind = data.get("type")
    if kind not in ANY_TYPE:
        raise UserError(f"a decision's type must be one of {', '.join(ANY_TYPE)}")
    if kind == "answer":
        return Answer(data.get("value"))
    if kind == "approve":
        return Approve()
    if kind == "edit":
        edited = data.get("edited_action")
        if not isinstance(edited, Mapping):
            raise UserError("an edit's edited_action must be a JSON object")
        args = edited.get("args")
        return Edit(dict(args) if isinstance(args, Mapping) else None, _text(edited.get("name")))
    message = data.get("message")
    if message is not None and not isinstance(message, str):
        raise UserError("a decision's message must be text")
    return Reject(message) if kind == "reject" else Respond(message)


@dataclass(frozen=True)
class Decisions:
    """One decision per action request, in the request's order."""

    items: tuple[Verdict, ...]

    @classmethod
    def parse(cls, raw: Decisions | Sequence[Any] | Mapping[str, Any]) -> Decisions:
        """From ``{"decisions": [...]}``, a plain list, or typed decisions."""
        if isinstance(raw, Decisions):
            return raw
        items = raw.get("decisions") if isinstance(raw, Mapping) else raw
        if not isinstance(items, Sequence) or isinstance(items, str):
            raise UserError('a decision must be {"decisions": [...]}')
        return cls(tuple(d if isinstance(d, VERDICTS) else parse_stored(d) for d in items))

    def to_json(self) -> list[dict[str, Any]]:
        return [d.to_json() for d in self.items]

    def resume_value(self) -> dict[str, Any]:
        """What ``Command(resume=...)`` gets for a batched interrupt, in the middleware's shape."""
        return {"decisions": self.to_json()}

    @property
    def approving(self) -> bool:
        """Whether anything would run (quorum and separation of duties apply)."""
        return any(d.approving for d in self.items)

    def __iter__(self) -> Iterator[Verdict]:
        return iter(self.items)

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> Verdict:
        return self.items[index]


def validate_decisions(
    request: HitlRequest, resume: Any, args_schemas: dict | None = None
) -> Decisions:
    """Refuse (``UserError``) anything but exactly one allowed, well-formed, storable decision
    per action; an edit keeps its tool and its locked arguments. Reads the raw JSON (a typed
    ``Decisions`` is checked as its JSON) so each refusal names what the reviewer sent. What
    a graph calls on the value its ``interrupt()`` returned."""
    answers = validate_answers(request, resume, args_schemas)
    if len(answers) != len(request.actions):
        raise UserError("every proposed action needs a decision (null leaves one unanswered)")
    return Decisions(tuple(answers[i] for i in sorted(answers)))


def validate_answers(
    request: HitlRequest, resume: Any, args_schemas: dict | None = None
) -> dict[int, Verdict]:
    """Like :func:`validate_decisions`, but a ``null`` in the list leaves that action
    unanswered: the decisions given, by position. :func:`read_answers` then
    :func:`check_answers`, the two steps a source and the rule pipeline take apart."""
    if isinstance(resume, Decisions):
        resume = resume.resume_value()
    if not isinstance(resume, dict):
        raise UserError('a decision must be {"decisions": [...]}')
    return check_answers(request, read_answers(resume), args_schemas)


def check_answers(
    request: HitlRequest, given: Sequence[Verdict | None], args_schemas: dict | None = None
) -> dict[int, Verdict]:
    """The decisions given, by position, if the request takes them: one per action (``None``
    unanswered), of a kind its review config allows, an edit keeping its tool, its locked
    arguments and its schema; a question takes an answer, or ``respond`` as its text."""
    actions = request.actions
    if len(given) != len(actions):
        raise UserError(
            f"expected {len(actions)} decision(s), one per proposed action, got {len(given)}"
        )
    out: dict[int, Verdict] = {}
    for i, (proposed, v) in enumerate(zip(actions, given, strict=True)):
        if v is None:
            continue
        question = proposed.question
        if question is not None:
            if isinstance(v, Respond) and v.text is not None:
                value = question.from_text(v.text, f"answer {i + 1}")
            elif isinstance(v, Answer):
                value = v.value
            else:
                raise UserError(
                    f'answer {i + 1}: a question takes {{"type": "answer", "value": ...}}'
                )
            out[i] = Answer(question.answer(value, f"answer {i + 1}"))
            continue
        kind = v.kind
        if kind not in DECISION_TYPES:
            raise UserError(f"decision {i + 1}: type must be one of {', '.join(DECISION_TYPES)}")
        if kind not in request.allowed(i):
            raise UserError(f"decision {i + 1}: {kind} is not allowed for {proposed.name}")
        if isinstance(v, Edit):
            _check_edit(request, i, v, (args_schemas or {}).get(proposed.name))
        out[i] = v
    return out


def _check_edit(request: HitlRequest, i: int, edit: Edit, schema: Any) -> None:
    proposed = request.actions[i]
    if edit.name != proposed.name:
        raise UserError(
            f"decision {i + 1}: an edit must keep the tool {proposed.name} "
            '({"edited_action": {"name": ..., "args": {...}}})'
        )
    validate_args(edit.args, schema, proposed.name)
    args = edit.args or {}
    for name in request.locked(i):
        if args.get(name) != proposed.args.get(name):
            raise UserError(
                f"decision {i + 1}: {name} of {proposed.name} may not be changed by a "
                "reviewer (reject the action instead)"
            )
    if schema and isinstance(schema.get("properties"), dict):
        _only(args, set(schema["properties"]), f"decision {i + 1}: {proposed.name}")
