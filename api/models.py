"""The HTTP API's bodies and answers, as pydantic models: validation on the way in, the OpenAPI
schema on the way out. Text is bounded and must be valid (no NUL, no lone surrogates)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from core import settings
from core.limits import check_text

THREAD_ID = r"^[A-Za-z0-9_.:-]{1,128}$"  # a thread id a caller chooses
RUN_ID = r"^[A-Za-z0-9_.:-]{1,160}$"  # a run's id: a chosen one and its requester's scope


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class StartRun(Strict):
    input: str = Field(min_length=1, description="what the agent should do")
    workflow: str = Field(default="refund", max_length=200, description="a startable workflow")
    thread_id: str | None = Field(
        default=None,
        pattern=THREAD_ID,
        description="a name for the run, yours alone: the run's id is this name in your own "
        "namespace (`<name>.<scope>`); asking again answers the same run. Without it the run's "
        "id is `thread_` and the 32 hex digits of a random UUID4 (122 random bits)",
    )
    expires_in: str | float | None = Field(
        default=None,
        description="approval window for this run, e.g. 2h or seconds (default: the policy's)",
        examples=["2h"],
    )

    @field_validator("input")
    @classmethod
    def _input(cls, value: str) -> str:
        return check_text(value, "input", settings.MAX_INPUT_CHARS.get())

    @field_validator("expires_in")
    @classmethod
    def _window(cls, value: str | float | None) -> str | float | None:
        if isinstance(value, str):
            check_text(value, "expires_in", 32)
        return value


class Reason(Strict):
    reason: str | None = Field(default=None, description="why, kept on the run")

    @field_validator("reason")
    @classmethod
    def _reason(cls, value: str | None) -> str | None:
        return None if value is None else check_text(value, "reason")


class Decision(Strict):
    interrupt_id: str = Field(max_length=200, description="the approval the decisions answer")
    digest: str = Field(
        max_length=64,
        description="`approval.digest` from the run as you read it: a decision on a request that "
        "changed since is refused (409)",
    )
    decisions: list[dict[str, Any] | None] | dict[str, Any] = Field(
        max_length=50,
        description="one decision per action, in order: approve, edit, reject, respond for a "
        'proposed tool call; {"type": "answer", "value": ...} for a plain interrupt\'s question; '
        "null leaves an action to another reviewer (several interrupts pending). Or an object "
        "keyed by LangGraph interrupt id (each question's `interrupt.id`): the interrupts it "
        "names are answered, the others left for later",
        examples=[[{"type": "approve"}]],
    )
    on_behalf_of: str | None = Field(
        default=None,
        max_length=200,
        description="decide for this person, who delegated to you (`POST /me/delegations`): "
        'recorded as "you for them", judged by the authority they lent; 403 `delegation` '
        "without an active delegation",
    )


class Approval(BaseModel):
    interrupt_id: str | None
    digest: str | None
    action_requests: list[dict[str, Any]]
    review_configs: list[dict[str, Any]]
    answers: list[dict[str, Any]] | None = Field(
        default=None,
        description="actions answered so far when several interrupts are pending: position, "
        "reviewer, decision, at",
    )
    needs: str | None = Field(None, description="who may approve it, e.g. `one of finance`")


class RunView(BaseModel):
    thread_id: str
    workflow: str
    status: str = Field(examples=["waiting"])
    attempts: int
    created_at: float
    updated_at: float
    requested_by: str | None = None
    approval: Approval | None = None
    expires_at: float | None = None
    result: str | None = None
    cancel_reason: str | None = None
    error: str | None = None


class CancelView(RunView):
    message: str


class HistoryView(RunView):
    events: list[dict[str, Any]]


class Accepted(BaseModel):
    status: str = Field(examples=["accepted"])
    thread_id: str


class ApprovalRecorded(BaseModel):
    status: str = Field(examples=["approval recorded"])
    thread_id: str
    approvers: list[str]
    quorum: int
    answered: int | None = None
    questions: int | None = None


class NewKey(Strict):
    name: str = Field(min_length=1, max_length=200, description="whose key it is")
    roles: list[str] = Field(min_length=1, examples=[["reviewer"]])
    groups: list[str] = Field(default=[], max_length=50, examples=[["finance"]])
    email: str | None = Field(
        default=None,
        max_length=254,
        description="where the key's holder gets approval e-mails (reviewers)",
        examples=["bob@example.com"],
    )


class KeyView(BaseModel):
    id: str
    name: str
    roles: list[str]
    groups: list[str] = []
    email: str | None = None
    created_at: float
    revoked_at: float | None = None
    last_used_at: float | None = None


class CreatedKey(KeyView):
    key: str = Field(description="the API key: shown once, stored only as a digest")


class ErrorDetail(BaseModel):
    code: str
    message: str


class ErrorBody(BaseModel):
    error: ErrorDetail
