"""A request as text lines (``python -m inbox show``): each proposed tool call, each plain
interrupt's question with its fields, the answer it expects and who answered it, and the
conversation so far."""

from __future__ import annotations

import json
from typing import Any

from core.hitl import describe_action
from core.questions import Question
from inbox import thread_id_from
from inbox.base import Approval
from store.answers import Answer, RunAnswers

EXPECTS = {"yesno": "yes or no", "text": "text (or JSON)", "json": "JSON"}


def expects(question: Question) -> str:
    """What answer the question takes, in words (the schema, when it declares one)."""
    words = EXPECTS[question.kind]
    schema = question.schema
    if schema and question.kind == "json":
        words += f" matching {json.dumps(schema, ensure_ascii=False)}"
    return words


def question_lines(index: int, question: Question, answer: Answer | None) -> list[str]:
    lines = [f"  question {index} (from {question.where() or 'the graph'}): {question.text}"]
    lines += [f"      {label}: {value}" for label, value in question.fields()]
    lines.append(f"      expects: {expects(question)}")
    lines.append(f"      interrupt id: {question.id}")  # `answer ID --interrupt` names it
    if answer is not None:
        value: Any = answer.decision.get("value")
        lines.append(
            f"      answered by {answer.reviewer}: {json.dumps(value, ensure_ascii=False)}"
        )
    return lines


def request_lines(answered: RunAnswers, approval: Approval) -> list[str]:
    thread_id = thread_id_from(approval.external_id)
    answers = answered.list(thread_id, approval.id) if thread_id else {}
    lines: list[str] = []
    for i, action in enumerate(approval.request.actions):
        if action.question is not None:
            lines += question_lines(i + 1, action.question, answers.get(i))
            continue
        lines.append(f"  action {i + 1}: {action.describe()}")
        if i in answers:
            lines.append(f"      decided by {answers[i].reviewer}: {answers[i].decision['type']}")
    return lines


def conversation_lines(conversation: list[dict[str, Any]], width: int = 160) -> list[str]:
    """The stored conversation, one short line per message, for ``python -m inbox show``."""
    lines = []
    for entry in conversation:
        role = entry.get("role", "?")
        text = " ".join(str(entry.get("text") or "").split())
        if role == "assistant" and entry.get("tool_calls"):
            calls = "; ".join(describe_action(c) for c in entry["tool_calls"])
            text = f"{text} -> {calls}" if text else f"-> {calls}"
        elif role == "tool":
            role = f"tool {entry.get('name')} ({entry.get('status')})"
        line = f"{role}: {text}"
        lines.append(line if len(line) <= width else line[: width - 1] + "…")
    return lines
