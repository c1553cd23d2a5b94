"""The approval payload contract: LangChain ``HumanInTheLoopMiddleware``'s request.

Requests are ``{"action_requests": [{name, args, description}], "review_configs":
[{action_name, allowed_decisions}]}``; answers are ``{"decisions": [...]}``, one per action request,
in order, read by ``core.hitl_decisions``. This module is the only reader of the request's JSON:
everything else holds a :class:`HitlRequest`, so a renamed key is one edit.
The JSON is stored on waiting runs and sent to LangGraph and the inboxes, so ``to_json`` gives
back exactly what ``parse`` read (unknown keys included).

Everything that crosses the inbox boundary is checked here, before any resume, because a resume
value that makes a node raise stays stored in the checkpoint and is re-delivered forever.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

from core import exactjson
from core.errors import UserError
from core.questions import Question
from core.schemas import validate

if TYPE_CHECKING:
    from core.hitl_decisions import Verdict

DecisionType = Literal["approve", "edit", "reject", "respond", "answer"]
# what a HITL action takes; a plain interrupt's question takes "answer" (``core.questions``)
DECISION_TYPES: tuple[DecisionType, ...] = ("approve", "edit", "reject", "respond")


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

    def edited(self, decisions: Iterable[Verdict]) -> HitlRequest:
        """The request as it will run, with each edit's arguments: the policy judges it again,
        since an edit may raise an amount past the quorum amount."""
        from core.hitl_decisions import Edit

        actions = tuple(
            replace(a, args=d.args or {}) if isinstance(d, Edit) else a
            for a, d in zip(self.actions, decisions, strict=False)
        )
        return replace(self, actions=actions + self.actions[len(actions) :])

    def summary(self) -> str:
        return "; ".join(a.describe() for a in self.actions)


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
