"""The workflows a run can be started with: each is a set of tools plus the model driving them."""

from __future__ import annotations

from dataclasses import dataclass

from agent.models import ChatModel, OfflineRefundModel
from agent.tools import REFUND_TOOLS, Tool
from store.errors import UserError


@dataclass(frozen=True)
class Workflow:
    name: str
    tools: tuple[Tool, ...]

    def model(self) -> ChatModel:
        return OfflineRefundModel()

    @property
    def args_schemas(self) -> dict[str, dict]:
        return {t.name: t.args_schema for t in self.tools}


WORKFLOWS = {"refund": Workflow("refund", REFUND_TOOLS)}


def get_workflow(name: str) -> Workflow:
    try:
        return WORKFLOWS[name]
    except KeyError:
        raise UserError(
            f"unknown workflow {name!r}; choose one of: {', '.join(sorted(WORKFLOWS))}"
        ) from None
