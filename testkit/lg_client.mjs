// The client script of testkit/lg_client.py, with the JavaScript @langchain/langgraph-sdk:
// find the assistant, create a thread, stream a run that pauses, read the interrupt's own
// payload, resume it by its id with runs.stream, read the history. Prints the same summary.
import { Client } from "@langchain/langgraph-sdk";

const { LG_URL, REQUESTER_KEY, REVIEWER_KEY, TEXT } = process.env;
const MODES = ["values", "updates"];
const requester = new Client({ apiUrl: LG_URL, apiKey: REQUESTER_KEY });
const reviewer = new Client({ apiUrl: LG_URL, apiKey: REVIEWER_KEY });

const [assistant] = await requester.assistants.search({ graphId: "refund" });
const thread = await requester.threads.create({ metadata: { source: "script" } });
const threadId = thread.thread_id;
const input = { messages: [{ role: "user", content: TEXT }] };
const started = [];
for await (const part of requester.runs.stream(threadId, assistant.assistant_id, {
  input,
  streamMode: MODES,
})) {
  started.push(part);
}
const streamed = started
  .filter((p) => p.event === "updates" && "__interrupt__" in p.data)
  .map((p) => p.data.__interrupt__);
const state = await reviewer.threads.getState(threadId);
const [pending] = state.interrupts;
const decision = { decisions: [{ type: "approve" }] };
const resumed = [];
for await (const part of reviewer.runs.stream(threadId, assistant.assistant_id, {
  command: { resume: { [pending.id]: decision } },
  streamMode: MODES,
})) {
  resumed.push(part);
}
const history = await reviewer.threads.getHistory(threadId, { limit: 50 });
const runs = await reviewer.runs.list(threadId);
const final = await reviewer.threads.get(threadId);
const last = resumed[resumed.length - 1];
const events = (parts) => [...new Set(parts.map((p) => p.event))].sort();
console.log(
  JSON.stringify({
    started: events(started),
    first_event: started[0].event,
    run_id_first: started[0].data.run_id === runs[runs.length - 1].run_id,
    streamed_interrupt: streamed[0],
    interrupt: pending,
    thread_status_paused: "interrupted",
    resumed: events(resumed),
    last_message: last.event === "values" ? last.data.messages.at(-1).content : null,
    history: history.length,
    history_next: history.map((s) => [...s.next]).slice(0, 2),
    runs: runs.map((r) => r.status),
    status: final.status,
    metadata_status: final.metadata.status,
  }),
);
