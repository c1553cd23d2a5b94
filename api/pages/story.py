"""A run's history in words for reviewers: who (a person's name, or "the worker"), what, and
when; process ids and keys stay in the details, never in the sentence.

The audit trail stores actors as ``page:alice`` (a person through a channel) or as process
owners (``inbox@vm:15357:064fa8``); decisions as HITL JSON. Here both become sentences such as
"alice approved with changes: amount EUR 540.00 → EUR 520.00".
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from core.hitl import ActionRequest
from inbox.views import ActionView, changed_fields, money, value_text
from store.history import HistoryEntry
from store.states import Event

Describe = Callable[[ActionRequest], ActionView]
CHANNELS = {"page", "api", "inbox", "webhook", "sweep", "operator", "cli"}


def who(actor: str | None, names: list[str] | None = None) -> str:
    """A person's name when the event names one; otherwise what kind of process acted."""
    if names:
        return ", ".join(names)
    actor = actor or ""
    channel, sep, rest = actor.partition(":")
    if sep and channel in CHANNELS and "@" not in channel and rest:
        return rest
    if channel == "tool":  # a side effect the agent's tool carried out
        return "the agent"
    if "@" in actor or actor.startswith(("worker", "sweep", "handoff")):
        return "the worker"
    return actor.split("@")[0] or "the worker"


def decision_words(
    decisions: list[dict[str, Any] | None], proposed: list[ActionRequest], describe: Describe
) -> str:
    """'approved', 'approved with changes: amount EUR 540.00 → EUR 520.00', 'rejected: …';
    a question of several left for later (answered in parts) is said so."""
    parts = []
    for i, d in enumerate(decisions):
        if d is None:
            parts.append("left for later")
            continue
        kind = d.get("type")
        if kind == "answer":
            parts.append(f"answered: {d.get('value')}")
        elif kind == "approve":
            parts.append("approved")
        elif kind == "edit":
            edited = d.get("edited_action") or {}
            before = proposed[i] if i < len(proposed) else None
            after = ActionRequest(str(edited.get("name")), dict(edited.get("args") or {}))
            if before is None:
                parts.append("approved with changes")
                continue
            diff = changed_fields(describe(before), describe(after))
            shown = "; ".join(f"{label} {old} → {new}" for label, old, new in diff)
            parts.append(f"approved with changes: {shown}" if shown else "approved")
        elif kind == "reject":
            parts.append(f"rejected: {d.get('message')}" if d.get("message") else "rejected")
        else:
            parts.append(f"responded: {d.get('message')}")
    return "; ".join(parts) or "decided"


def story(
    events: list[HistoryEntry], proposed: list[ActionRequest], describe: Describe
) -> list[dict[str, Any]]:
    """Each event as ``at``, ``who``, ``what`` (words) and ``details`` (the process, for the
    curious; shown folded)."""
    out = []
    for e in events:
        d = e.detail if isinstance(e.detail, dict) else {}
        reason, actor = e.reason, e.actor
        names = d.get("approvers") or ([d["decided_by"]] if d.get("decided_by") else None)
        what = ""
        if reason == Event.STARTED:
            what = "started the run"
        elif reason == Event.PAUSED:
            what = "proposed " + "; ".join(
                (a.get("seen") or {}).get("summary") or describe(ActionRequest.parse(a)).summary
                for a in d.get("action_requests", [])
                if isinstance(a, dict)
            )
        elif reason == Event.APPROVAL_RECORDED and d.get("restart"):
            withdrawn = ", ".join(d.get("withdrawn") or [])
            what = f"made a counter-proposal; the count restarts ({withdrawn} withdrawn)"
        elif reason in (Event.APPROVAL_RECORDED, Event.DECISION_RECORDED, Event.CLAIMED):
            decisions = d.get("decisions")
            if decisions is None:
                decisions = (d.get("decision") or {}).get("decisions", [])
            what = decision_words(decisions, proposed, describe)
            if reason == Event.APPROVAL_RECORDED:
                what += f" ({d.get('approvals')} of {d.get('quorum')} approvals)"
        elif reason == Event.SIDE_EFFECT:
            result = d.get("result")
            what = side_effect_words(str(d.get("tool")), result if isinstance(result, dict) else {})
        elif d.get("result"):
            what = f"{reason}: {d['result']}"
        else:
            what = str(reason)
        out.append({"at": e.at, "who": who(actor, names), "what": what, "details": actor or ""})
    return out


def side_effect_words(tool: str, result: dict[str, Any]) -> str:
    """'refunded EUR 49.90 on order A-1001' from a tool's result, without JSON or code words;
    the reference the downstream system gave (refund or order number) is :func:`reference`."""
    if result.get("error"):
        return f"not carried out: {result['error']}"
    cur = str(result.get("currency") or "")
    if result.get("refund_id") and cur:
        return f"refunded {money(result.get('amount'), cur)} on order {result.get('order_id')}"
    if result.get("po_id") and cur:
        return (
            f"ordered {result.get('quantity')} × {result.get('item')} from "
            f"{result.get('supplier')} for {money(result.get('total'), cur)}, charged to "
            f"{result.get('cost_center')}"
        )
    shown = ", ".join(
        f"{k.replace('_', ' ')} {value_text(v)}"
        for k, v in result.items()
        if not k.endswith("_id") and k != "status" and not isinstance(v, dict | list)
    )
    return f"{tool.replace('_', ' ')} {result.get('status') or 'done'}: {shown}".strip()


def reference(result: dict[str, Any]) -> str:
    """The downstream system's reference for a side effect (behind "details" on the page)."""
    for key in ("refund_id", "po_id"):
        if result.get(key):
            return f"{key.removesuffix('_id').replace('po', 'purchase order')} {result[key]}"
    return ""


def conversation_words(conversation: list[dict[str, Any]], describe: Describe) -> list[str]:
    """The conversation for the page: tool calls as the workflow describes them, tool results
    as labelled words instead of JSON."""
    import json

    lines = []
    for entry in conversation:
        role = str(entry.get("role", ""))
        text = " ".join(str(entry.get("text") or "").split())
        if role == "assistant" and entry.get("tool_calls"):
            calls = "; ".join(describe(ActionRequest.parse(c)).summary for c in entry["tool_calls"])
            text = f"{text} — asks to: {calls}" if text else f"Asks to: {calls}"
            role = "Agent"
        elif role == "tool":
            try:
                text = value_text(json.loads(text))
            except ValueError:
                pass
            role = f"Result of {str(entry.get('name')).replace('_', ' ')}"
        else:
            role = {"user": "Request", "assistant": "Agent"}.get(role, role.capitalize())
        lines.append(f"{role}: {text[:2000]}")
    return lines
