// Agent Inbox's own call sequence (langchain-ai/agent-inbox: ThreadContext, contexts/utils,
// use-interrupted-actions), replayed with the JavaScript @langchain/langgraph-sdk for one
// thread and one act: list the interrupted threads of the inbox's graph, read the thread,
// then accept, edit, respond or ignore (runs.stream / runs.create with command.resume, the
// HITL middleware's shape for an interrupt with action_requests), or resolve
// (threads.updateState with values null, asNode __end__). Prints what each call answered.
import { Client } from "@langchain/langgraph-sdk";

const { LG_URL, REVIEWER_KEY, THREAD_ID, GRAPH_ID, ACT, EDIT_ARGS, RESPONSE, SEEN } = process.env;
const client = new Client({ apiUrl: LG_URL, apiKey: REVIEWER_KEY });
const out = {};

// fetchThreads("interrupted"): the inbox's page, filtered by its graph
const threads = await client.threads.search({
  offset: 0,
  limit: 10,
  status: "interrupted",
  metadata: { graph_id: GRAPH_ID },
});
out.listed = threads.some((t) => t.thread_id === THREAD_ID);
// fetchSingleThread: the thread, its interrupt normalised as normalizeInterrupt does
const thread = await client.threads.get(THREAD_ID);
// (a page open since before someone else decided still shows, and sends, the old request)
const [raw] = Object.values(thread.interrupts)[0] ?? [{ value: JSON.parse(SEEN ?? "null") }];
const request = raw.value.action_requests[0];
const decisions = raw.value.review_configs[0].allowed_decisions;
const actionRequest = { action: request.name, args: request.args };
out.seen = raw.value;
out.config = {
  allow_accept: decisions.includes("approve"),
  allow_edit: decisions.includes("edit"),
  allow_respond: decisions.includes("reject"),
};
// sendHumanResponse with isHitlMiddleware: accept -> approve, response -> reject
const mapped = (r) => ({
  ...r,
  type: r.type === "accept" ? "approve" : r.type === "response" ? "reject" : r.type,
});
const send = async (response, stream) => {
  const command = { resume: { decisions: response.map(mapped) } };
  if (stream) {
    const events = [];
    for await (const chunk of client.runs.stream(THREAD_ID, GRAPH_ID, {
      command,
      streamMode: "events",
    })) {
      events.push(chunk.event);
    }
    return events;
  }
  return client.runs.create(THREAD_ID, GRAPH_ID, { command });
};
try {
  if (ACT === "accept") {
    out.answer = await send([{ type: "accept", args: actionRequest }], true);
  } else if (ACT === "edit") {
    const args = { ...actionRequest.args, ...JSON.parse(EDIT_ARGS) };
    out.answer = await send([{ type: "edit", args: { action: request.name, args } }], true);
  } else if (ACT === "respond") {
    out.answer = await send([{ type: "response", args: RESPONSE }], true);
  } else if (ACT === "ignore") {
    out.answer = await send([{ type: "ignore", args: null }], false);
  } else if (ACT === "resolve") {
    out.answer = await client.threads.updateState(THREAD_ID, { values: null, asNode: "__end__" });
  }
} catch (e) {
  out.error = { status: e.status ?? null, message: String(e.message ?? e) };
}
// after the act, the inbox reads the thread again
out.after = (await client.threads.get(THREAD_ID)).status;
console.log(JSON.stringify(out));
