"""The Claude adapter: the ``anthropic`` SDK's ``messages.create`` with tools, behind ChatModel.

The SDK is imported on first use, not with this module: it costs well over a second here, and a
process that runs the offline model (or only resumes a run that finishes without the model) must
not pay for it. Retries and timeouts are the SDK's own (``ANTHROPIC_MAX_RETRIES``,
``ANTHROPIC_TIMEOUT`` override its defaults); what is still failing after them becomes a
:class:`~agent.models.ModelError` with a one-line message, which the runner records on the run.
"""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from agent.models import ModelError
from agent.tools import Tool
from core import settings
from core.errors import UserError

RETRYABLE = (408, 409, 429)


def model_id() -> str:
    return settings.ANTHROPIC_MODEL.get()


def make_client() -> Any:
    """An ``anthropic.Anthropic`` client from the settings (checked at start-up); the SDK's own
    retries with backoff that honours ``retry-after``, and its timeout, unless overridden."""
    import anthropic

    key = settings.ANTHROPIC_API_KEY.get()
    if not key:
        raise UserError(
            "ANTHROPIC_API_KEY is not set; set it, or unset it to use the offline model"
        )
    options: dict[str, Any] = {
        "api_key": key,
        "max_retries": settings.ANTHROPIC_MAX_RETRIES.get(),
        "timeout": settings.ANTHROPIC_TIMEOUT.get(),
    }
    if base_url := settings.ANTHROPIC_BASE_URL.get():
        options["base_url"] = base_url
    return anthropic.Anthropic(**options)


# -- langchain_core messages <-> Messages API ---------------------------------------------------


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts = []
    for block in content or []:
        if isinstance(block, str):
            parts.append(block)
        elif isinstance(block, dict) and block.get("type") == "text":
            parts.append(block.get("text", ""))
    return "".join(parts)


def to_messages(messages: list[BaseMessage]) -> list[dict]:
    """The conversation as Messages API turns.

    Tool results become ``tool_result`` blocks in the next user turn (``is_error`` when the call
    failed or a reviewer rejected it), and consecutive same-role turns are merged, since the API
    wants the results of one assistant turn together in the user turn right after it.
    """
    turns: list[dict] = []

    def add(role: str, blocks: list[dict]) -> None:
        if not blocks:
            return
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})

    for message in messages:
        if isinstance(message, HumanMessage):
            text = _text(message.content)
            add("user", [{"type": "text", "text": text}] if text else [])
        elif isinstance(message, AIMessage):
            text = _text(message.content)
            blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
            blocks += [
                {"type": "tool_use", "id": tc["id"], "name": tc["name"], "input": tc["args"]}
                for tc in message.tool_calls
            ]
            add("assistant", blocks)
        elif isinstance(message, ToolMessage):
            block: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": message.tool_call_id,
                "content": _text(message.content),
            }
            if message.status == "error":
                block["is_error"] = True
            add("user", [block])
    return turns


def tool_specs(tools: list[Tool]) -> list[dict]:
    """Tool definitions from the pydantic argument models, the same schemas edits are checked
    against."""
    return [
        {"name": t.name, "description": t.description, "input_schema": t.args_schema} for t in tools
    ]


def from_response(response: Any) -> AIMessage:
    """An AIMessage from a Messages API response; refuses tool input that is not an object."""
    texts, calls = [], []
    for block in response.content:
        kind = getattr(block, "type", None)
        if kind == "text":
            texts.append(block.text)
        elif kind == "tool_use":
            if not isinstance(block.input, dict):
                raise ModelError(
                    f"Claude sent malformed input for tool {block.name}: "
                    f"expected a JSON object, got {type(block.input).__name__}"
                )
            calls.append({"id": block.id, "name": block.name, "args": block.input})
    if calls and response.stop_reason == "max_tokens":
        raise ModelError(
            "Claude ran out of output tokens while writing a tool call; raise ANTHROPIC_MAX_TOKENS"
        )
    return AIMessage(
        content="".join(texts),
        tool_calls=calls,
        id=response.id,
        response_metadata={"model": response.model, "stop_reason": response.stop_reason},
    )


def describe_error(exc: Exception, max_retries: int) -> str:
    """One line for the run's ``error``: status, error type, the API's message, request id."""
    import anthropic

    if isinstance(exc, anthropic.APIStatusError):
        status = exc.status_code
        text = f"Claude API error {status}"
        if exc.type:
            text += f" {exc.type}"
        if exc.api_message:
            text += f": {' '.join(str(exc.api_message).split())[:300]}"
        if status in RETRYABLE or status >= 500:
            text += f" (still failing after {max_retries} retries)"
        if status == 401:
            text += "; check ANTHROPIC_API_KEY"
        if exc.request_id:
            text += f" [request {exc.request_id}]"
        return text
    if isinstance(exc, anthropic.APITimeoutError):
        return f"Claude API timed out (after {max_retries} retries); see ANTHROPIC_TIMEOUT"
    if isinstance(exc, anthropic.APIConnectionError):
        return f"cannot reach the Claude API (after {max_retries} retries); see ANTHROPIC_BASE_URL"
    return f"Claude API call failed: {type(exc).__name__}"


class ClaudeModel:
    """Claude through the Messages API, with the workflow's system prompt and tools."""

    def __init__(self, system: str, *, model: str | None = None, client: Any = None):
        self.model = model or model_id()
        self.name = f"claude ({self.model})"
        self.system = system
        self._client = client

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = make_client()
        return self._client

    def invoke(self, messages: list[BaseMessage], tools: list[Tool]) -> AIMessage:
        import anthropic

        client = self.client
        max_tokens = settings.ANTHROPIC_MAX_TOKENS.get()
        try:
            response = client.messages.create(
                model=self.model,
                max_tokens=max_tokens,
                system=self.system,
                messages=to_messages(messages),
                tools=tool_specs(tools),
            )
        except anthropic.AnthropicError as exc:
            raise ModelError(describe_error(exc, client.max_retries)) from None
        return from_response(response)
