"""The approval payload contract: LangChain ``HumanInTheLoopMiddleware``'s request and decisions.

Requests are ``{"action_requests": [{name, args, description}], "review_configs":
[{action_name, allowed_decisions}]}``; answers are ``{"decisions": [...]}``, one per action request,
in order. This module is the only reader of that JSON: everything else holds a
:class:`HitlRequest` and :class:`Decisions`, so a renamed key or a new decision type is one edit.
The JSON is stored on waiting runs and sent to LangGraph and the inboxes, so ``to_json`` gives
back exactly what ``parse`` read (unknown keys included).

Everything that crosses the inbox boundary is checked here, before any resume, because a resume
value that makes a node raise stays stored in the checkpoint and is re-delivered forever.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, cast

from core import exactjson
from core.errors import UserError
from core.questions import Question
from core.schemas import validate

DecisionType = Literal["approve", "edit", "reject", "respond", "answer"]
# what a HITL action takes; a plain interrupt's question takes "answer" (``core.questions``)
DECISION_TYPES: tuple[DecisionType, ...] = ("approve", "edit", "reject", "respond")
ANY_TYPE: tuple[DecisionType, ...] = (*DECISION_TYPES, "answer")
APPROVING = frozenset({"approve", "edit", "answer"})


def _object(raw: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(raw, Mapping):
        raise UserError(f"{what} must be a JSON object")
    return raw


@dataclass(frozen=True)
class ActionRequest:
    """One proposed tool call a reviewer decides on."""

    name: str
    args: dict[str, Any]
    description: str | None = None  # None: absent (the middleware's is optional)
    tool_call_id: str | None = None  # per-call mode: which interrupt the decision answers
    question: Question | None = None  # a plain interrupt: what it asks, answered as a whole
    extra: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def parse(cls, raw: Any) -> ActionRequest:
        data = dict(_object(raw, "an action request"))
        name = data.pop("name", None)
        if not isinstance(name, str):
            raise UserError("an action request must name its tool")
        args = data.pop("args", None)
        if args is None:
            args = {}  # only a hand-written request omits them
        if not isinstance(args, Mapping):
            raise UserError(f"the arguments of {name} must be a JSON object")
        description, call = data.pop("description", None), data.pop("tool_call_id", None)
        asked = data.pop("interrupt", None)
        question = None if asked is None else Question.parse(asked)
        return cls(name, dict(args), description, call, question, data)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "args": self.args}
        if self.description is not None:
            out["description"] = self.description
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        if self.question is not None:
            out["interrupt"] = self.question.to_json()
        return {**out, **self.extra}

    def describe(self) -> str:
        return describe_action(self)


@dataclass(frozen=True)
class ReviewConfig:
    """How one tool may be decided on: the decision types, and arguments an edit must keep."""

    action_name: str
    allowed_decisions: tuple[str, ...] = DECISION_TYPES
    locked_arguments: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def parse(cls, raw: Any) -> ReviewConfig:
        data = dict(_object(raw, "a review config"))
        name = data.pop("action_name", None)
        if not isinstance(name, str):
            raise UserError("a review config must name its action")
        allowed = data.pop("allowed_decisions", None)
        allowed = DECISION_TYPES if allowed is None else allowed  # absent: all are allowed
        locked = data.pop("locked_arguments", None) or ()
        return cls(name, tuple(allowed), tuple(locked), data)

    def to_json(self) -> dict[str, Any]:
        out = {"action_name": self.action_name, "allowed_decisions": list(self.allowed_decisions)}
        out.update(self.extra)
        if self.locked_arguments:
            out["locked_arguments"] = list(self.locked_arguments)
        return out


@dataclass(frozen=True)
class HitlRequest:
    """What a paused run asks reviewers: the proposed actions in order, and their rules."""

    actions: tuple[ActionRequest, ...]
    configs: tuple[ReviewConfig, ...] = ()

    @classmethod
    def parse(cls, raw: Mapping[str, Any] | None) -> HitlRequest:
        """The typed request from its JSON: read once, where JSON enters (a stored row, a
        graph's interrupt value, a request body); everything after holds the typed one."""
        data = _object(raw if raw is not None else {}, "a HITL request")
        actions = data.get("action_requests") or []
        configs = data.get("review_configs") or []
        if not isinstance(actions, list) or not isinstance(configs, list):
            raise UserError("a HITL request's action_requests and review_configs must be lists")
        return cls(
            tuple(ActionRequest.parse(a) for a in actions),
            tuple(ReviewConfig.parse(c) for c in configs),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "action_requests": [a.to_json() for a in self.actions],
            "review_configs": [c.to_json() for c in self.configs],
        }

    def config(self, index: int) -> ReviewConfig | None:
        name = self.actions[index].name
        return next((c for c in self.configs if c.action_name == name), None)

    def allowed(self, index: int) -> list[str]:
        if self.actions[index].question is not None:
            return ["answer"]
        config = self.config(index)
        return list(config.allowed_decisions if config else DECISION_TYPES)

    def locked(self, index: int) -> list[str]:
        """Arguments of the action a reviewer may not change (the refund's ``order_id``)."""
        config = self.config(index)
        return list(config.locked_arguments if config else ())

    def locking(self, locked: Mapping[str, Sequence[str]]) -> HitlRequest:
        """This request with each tool's locked arguments named in its review config."""
        configs = tuple(
            replace(c, locked_arguments=tuple(locked[c.action_name]))
            if locked.get(c.action_name)
            else c
            for c in self.configs
        )
        return replace(self, configs=configs)

    def shown(self) -> list[list[Any]]:
        """Each action's name and arguments, in order: what a reviewer decides on."""
        return [[a.name, a.question.value if a.question else a.args] for a in self.actions]

    def digest(self) -> str:
        """What a reviewer saw, as a digest. A decision names it, so a page that went stale
        cannot approve something else; it is stored on waiting runs, so it never changes."""
        canonical = exactjson.dumps(
            self.shown(), sort_keys=True, separators=(",", ":"), ensure_ascii=False
        )
        return hashlib.sha256(canonical.encode()).hexdigest()[:32]

    def edited(self, decisions: Decisions | Sequence[ActionDecision]) -> HitlRequest:
        """The request as it will run, with each edit's arguments: the policy judges it again,
        since an edit may raise an amount past the quorum amount."""
        actions = tuple(
            replace(a, args=d.args or {}) if d.type == "edit" else a
            for a, d in zip(self.actions, decisions, strict=False)
        )
        return replace(self, actions=actions + self.actions[len(actions) :])

    def summary(self) -> str:
        return "; ".join(a.describe() for a in self.actions)


@dataclass(frozen=True)
class ActionDecision:
    """A reviewer's answer to one action: approve, edit (with the tool and its new arguments),
    reject or respond (with a message for the model)."""

    type: DecisionType
    args: dict[str, Any] | None = None  # edit: the arguments to run with
    name: str | None = None  # edit: the tool (the proposed one; an edit cannot switch tools)
    message: str | None = None  # reject/respond; None: absent
    value: Any = None  # answer: what ``interrupt()`` returns

    @classmethod
    def parse(cls, raw: Any) -> ActionDecision:
        """One decision as stored or sent; :func:`validate_decisions` is the strict reading of
        a reviewer's input."""
        data = _object(raw, "a decision")
        kind = data.get("type")
        if kind not in ANY_TYPE:
            raise UserError(f"a decision's type must be one of {', '.join(ANY_TYPE)}")
        if kind == "answer":
            return cls("answer", value=data.get("value"))
        if kind == "edit":
            edited = _object(data.get("edited_action"), "an edit's edited_action")
            return cls("edit", edited.get("args"), edited.get("name"))
        if kind == "approve":
            return cls("approve")
        message = data.get("message")
        if message is not None and not isinstance(message, str):
            raise UserError("a decision's message must be text")
        return cls(cast(DecisionType, kind), message=message)

    def to_json(self) -> dict[str, Any]:
        if self.type == "edit":
            return {"type": "edit", "edited_action": {"name": self.name, "args": self.args}}
        if self.type == "answer":
            return {"type": "answer", "value": self.value}
        if self.type == "approve" or self.message is None:
            return {"type": self.type}
        return {"type": self.type, "message": self.message}

    @property
    def approving(self) -> bool:
        return self.type in APPROVING


@dataclass(frozen=True)
class Decisions:
    """One decision per action request, in the request's order."""

    items: tuple[ActionDecision, ...]

    @classmethod
    def parse(cls, raw: Decisions | Sequence[Any] | Mapping[str, Any]) -> Decisions:
        """From ``{"decisions": [...]}``, a plain list, or typed decisions."""
        if isinstance(raw, Decisions):
            return raw
        items = raw.get("decisions") if isinstance(raw, Mapping) else raw
        if not isinstance(items, Sequence) or isinstance(items, str):
            raise UserError('a decision must be {"decisions": [...]}')
        return cls(
            tuple(d if isinstance(d, ActionDecision) else ActionDecision.parse(d) for d in items)
        )

    def to_json(self) -> list[dict[str, Any]]:
        return [d.to_json() for d in self.items]

    def resume_value(self) -> dict[str, Any]:
        """What ``Command(resume=...)`` gets for a batched interrupt, in the middleware's shape."""
        return {"decisions": self.to_json()}

    @property
    def approving(self) -> bool:
        """Whether anything would run (quorum and separation of duties apply)."""
        return any(d.approving for d in self.items)

    def __iter__(self) -> Iterator[ActionDecision]:
        return iter(self.items)

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> ActionDecision:
        return self.items[index]


def validate_args(args: Any, schema: dict | None, name: str) -> None:
    """Edited arguments must satisfy the tool's JSON schema (when the request carries one)."""
    if not isinstance(args, dict):
        raise UserError(f"edited arguments for {name} must be a JSON object")
    if not schema:
        return
    import jsonschema

    try:
        validate(args, schema)
    except jsonschema.ValidationError as exc:
        where = ".".join(str(p) for p in exc.absolute_path) or "arguments"
        raise UserError(f"invalid arguments for {name}: {where}: {exc.message}") from None


def validate_decisions(
    request: HitlRequest,
    resume: Any,
    args_schemas: dict | None = None,
) -> Decisions:
    """Refuse (``UserError``) anything but exactly one allowed, well-formed, storable decision
    per action; an edit keeps its tool and its locked arguments. Reads the raw JSON (a typed
    ``Decisions`` is checked as its JSON) so each refusal names what the reviewer sent."""
    answers = validate_answers(request, resume, args_schemas)
    if len(answers) != len(request.actions):
        raise UserError("every proposed action needs a decision (null leaves one unanswered)")
    return Decisions(tuple(answers[i] for i in sorted(answers)))


def validate_answers(
    request: HitlRequest,
    resume: Any,
    args_schemas: dict | None = None,
) -> dict[int, ActionDecision]:
    """Like :func:`validate_decisions`, but a ``null`` in the list leaves that action
    unanswered: the decisions given, by position. The wire's shape is read by
    :func:`core.hitl_decisions.read_answers` and judged against the request by
    :func:`core.hitl_decisions.check_answers`, the two steps a source and the rule pipeline
    take apart."""
    from core.hitl_decisions import check_answers, read_answers

    if isinstance(resume, Decisions):
        resume = resume.resume_value()
    if not isinstance(resume, dict):
        raise UserError('a decision must be {"decisions": [...]}')
    return check_answers(request, read_answers(resume), args_schemas)


def describe_action(action: ActionRequest | Mapping[str, Any]) -> str:
    """``issue_refund(order_id="A-1001", amount=49.9)`` for one-line listings (a proposed
    action, or a tool call in the conversation)."""
    if isinstance(action, ActionRequest) and action.question is not None:
        return action.question.describe()
    if isinstance(action, ActionRequest):
        name, args = action.name, action.args
    else:
        name, args = action["name"], action.get("args", {})
    return f"{name}({', '.join(f'{k}={exactjson.dumps(v)}' for k, v in args.items())})"
