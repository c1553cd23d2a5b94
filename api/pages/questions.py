"""Plain interrupts on a request's page: each question with its fields, what answer it takes
and who answered it already; the tool-call forms keep to the HITL actions, and a decision
posted from them lands at those actions' positions (a question is answered on its own)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from api.pages.forms import ActionForm, action_forms
from core.hitl import HitlRequest
from core.money import DEFAULT_LOCALE
from core.questions import Question
from inbox.show import expects
from inbox.views import ActionView
from store.answers import Answer
from store.states import Run
from worker.runner import Runner


@dataclass(frozen=True)
class Asked:
    index: int
    question: Question
    expects: str
    answer: Answer | None

    @property
    def answered_value(self) -> str:
        value: Any = (self.answer.decision if self.answer else {}).get("value")
        return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def questions(r: Runner, run: Run) -> list[Asked]:
    if not run.interrupt_id:
        return []
    answers = r.decisions.answers.list(run.thread_id, run.interrupt_id)
    return [
        Asked(i, a.question, expects(a.question), answers.get(i))
        for i, a in enumerate(run.asked.actions)
        if a.question is not None
    ]


def tool_forms(
    request: HitlRequest,
    schemas: dict[str, dict],
    views: list[ActionView] | None = None,
    locale: str = DEFAULT_LOCALE,
    derived: dict[str, list[str]] | None = None,
    choices: Callable[[str], dict[str, list[tuple[str, str]]]] | None = None,
) -> list[ActionForm]:
    """The decision forms of the proposed tool calls only, numbers in the reviewer's locale."""
    actions = request.actions
    forms = action_forms(request, schemas, views, locale, derived, choices)
    return [f for f in forms if actions[f.index].question is None]


def page_forms(
    r: Runner, run: Run, locale: str, views: list[ActionView] | None = None
) -> list[ActionForm]:
    """A waiting run's decision forms as its page shows them: the workflow's words and money
    fields, arguments that follow from others read-only, numbers the reviewer's way."""
    flow = r.graphs.workflow(run.workflow)
    derived = flow.derived_arguments()
    if views is None:
        views = r.graphs.views(run.workflow, run.asked)
    choices = flow.argument_choices
    schemas = r.args_schemas(run.workflow)
    return tool_forms(run.asked, schemas, views, locale, derived, choices)


def rederive(r: Runner, run: Run, decisions: list[dict | None]) -> list[dict | None]:
    """Each edit with the arguments that follow from others derived again (a new supplier's
    catalogue price): what the reviewer saw in the preview is what is decided."""
    derive = r.graphs.workflow(run.workflow).derive
    out: list[dict | None] = []
    for d in decisions:
        edited = (d or {}).get("edited_action") if (d or {}).get("type") == "edit" else None
        if isinstance(edited, dict) and isinstance(edited.get("args"), dict):
            args = derive(str(edited.get("name")), dict(edited["args"]))
            d = {**(d or {}), "edited_action": {**edited, "args": args}}
        out.append(d)
    return out


def placed(
    request: HitlRequest, forms: list[ActionForm], decisions: list[dict] | None
) -> list[dict | None] | None:
    """The forms' decisions at their actions' positions, questions left unanswered."""
    if decisions is None:
        return None
    out: list[dict | None] = [None] * len(request.actions)
    for form, decision in zip(forms, decisions, strict=True):
        out[form.index] = decision
    return out


def posted_answer(question: Question, posted: dict[str, str]) -> Any:
    """The answer a question's form posted: yes/no, JSON (when asked for, or ticked) or text;
    JSON that does not parse goes on as text, for the schema check to name."""
    text = posted.get("answer", "")
    if question.kind == "yesno":
        return text == "yes"
    if question.kind == "json" or posted.get("as_json"):
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            return text
    return text
