"""The client script a LangGraph user runs, with the Python ``langgraph-sdk``, unmodified:
find the assistant, create a thread, stream a run that pauses, read the interrupt's own
payload, resume it by its id with ``runs.stream``, read the history. ``testkit/lg_client.mjs``
is the same script for the JavaScript SDK; both answer the same summary."""

from __future__ import annotations

from typing import Any, NotRequired, get_args, get_origin, get_type_hints

from langgraph_sdk import get_sync_client
from langgraph_sdk.schema import Assistant, Run, RunStatus, Thread, ThreadState, ThreadStatus

MODES = ["values", "updates"]
TYPES = {"assistant": Assistant, "thread": Thread, "state": ThreadState, "run": Run}
STATUSES = {"thread": get_args(ThreadStatus), "run": get_args(RunStatus)}


def typed(kind: str, value: Any) -> Any:
    """``value``, checked against the SDK's own type of it: every key the type requires, no
    key it does not name, and a status among the ones it lists."""
    kind_type = TYPES[kind]
    hints = get_type_hints(kind_type, include_extras=True)
    required = {k for k, h in hints.items() if get_origin(h) is not NotRequired}
    missing = required - set(value)
    named = set(hints)
    assert not missing and set(value) <= named, (kind, missing, set(value) - named)
    if kind in STATUSES:
        assert value["status"] in STATUSES[kind], value["status"]
    return value


def client_script(url: str, requester_key: str, reviewer_key: str, text: str) -> dict[str, Any]:
    requester = get_sync_client(url=url, api_key=requester_key, timeout=60)
    reviewer = get_sync_client(url=url, api_key=reviewer_key, timeout=60)
    [assistant] = requester.assistants.search(graph_id="refund")
    typed("assistant", assistant)
    thread = typed("thread", requester.threads.create(metadata={"source": "script"}))
    thread_id, assistant_id = thread["thread_id"], assistant["assistant_id"]
    given = {"messages": [{"role": "user", "content": text}]}
    started = list(requester.runs.stream(thread_id, assistant_id, input=given, stream_mode=MODES))
    streamed = [
        p.data["__interrupt__"]
        for p in started
        if p.event == "updates" and "__interrupt__" in p.data
    ]
    state = typed("state", reviewer.threads.get_state(thread_id))
    [pending] = state["interrupts"]
    decision = {"decisions": [{"type": "approve"}]}
    resumed = list(
        reviewer.runs.stream(
            thread_id,
            assistant_id,
            command={"resume": {pending["id"]: decision}},
            stream_mode=MODES,
        )
    )
    history = [typed("state", s) for s in reviewer.threads.get_history(thread_id, limit=50)]
    runs = [typed("run", r) for r in reviewer.runs.list(thread_id)]
    final = typed("thread", reviewer.threads.get(thread_id))
    return {
        "started": sorted({p.event for p in started}),
        "first_event": started[0].event,
        "run_id_first": started[0].data["run_id"] == runs[-1]["run_id"],
        "streamed_interrupt": streamed[0],
        "interrupt": pending,
        "thread_status_paused": "interrupted",
        "resumed": sorted({p.event for p in resumed}),
        "last_message": resumed[-1].data["messages"][-1]["content"]
        if resumed[-1].event == "values"
        else None,
        "history": len(history),
        "history_next": [list(s["next"]) for s in history][:2],
        "runs": [r["status"] for r in runs],
        "status": final["status"],
        "metadata_status": final["metadata"]["status"],
    }
