"""A plain interrupt's question answered from its request page, through the one decision path:
a decision that answers that one action and leaves the others to their own reviewers."""

from __future__ import annotations

from fastapi import APIRouter, BackgroundTasks, Request
from fastapi.responses import Response

from api.pages.questions import posted_answer
from api.pages.request import result_page, reviewer_post
from api.pages.session import Posted, runner
from core.hitl_decisions import Answer, Verdict
from worker.decisions import Decision, Source
from worker.refusals import Refusal, Refused

router = APIRouter()


@router.post("/inbox/requests/{thread_id}/answer")
def answer(
    thread_id: str, request: Request, background: BackgroundTasks, posted: Posted
) -> Response:
    cannot = "You cannot answer here: it needs a reviewer in the local inbox."
    gate = reviewer_post(request, thread_id, posted, cannot)
    if isinstance(gate, Response):
        return gate
    who, run = gate
    actions = run.asked.actions
    position = posted.get("position", "")
    index = int(position) if position.isdigit() else -1
    question = actions[index].question if 0 <= index < len(actions) else None
    if question is None:
        refused = Refused(Refusal.INVALID, "invalid answer: no such question on this request")
        return result_page(request, who, run, refused, posted, background)
    decisions: list[Verdict | None] = [None] * len(actions)
    decisions[index] = Answer(posted_answer(question, posted))
    decision = Decision(
        thread_id=thread_id,
        interrupt_id=posted.get("interrupt_id", ""),
        decisions=decisions,
        approvers=[who.name],
        source=Source.PAGE,
        digest=posted.get("digest", ""),
    )
    result = runner(request).decide(decision, run=run)
    return result_page(request, who, run, result, posted, background)
