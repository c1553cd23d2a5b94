import statistics
import time

from conftest import fresh_database, settings_to_clear
from langgraph_sdk import get_sync_client
from servers import api_key, start_server, worker_env

from store.db import open_store
from worker.runner import Runner
from agent.ledger import Ledger


def test_measure(tmp_path, monkeypatch):
    with fresh_database("sqlite", tmp_path, None) as db_env:
        server = start_server(worker_env(db_env), tmp_path / "uvicorn.log")
        try:
            for n in settings_to_clear():
                monkeypatch.delenv(n, raising=False)
            for k, v in db_env.items():
                monkeypatch.setenv(k, v)
            rita = api_key(db_env, "rita", "requester")["authorization"].split()[1]
            bob = api_key(db_env, "bob", "reviewer")["authorization"].split()[1]
            lg = f"{server.url}/lg"
            r = get_sync_client(url=lg, api_key=rita, timeout=60)
            b = get_sync_client(url=lg, api_key=bob, timeout=60)
            timings = {"start_stream_first_event": [], "start_stream_total": [], "create_join": [], "wait": [], "stream_resume_total": []}
            with open_store() as store:
                for i in range(30):
                    Ledger(store.db).clear()
                    t = r.threads.create()["thread_id"]
                    t0 = time.perf_counter(); first = None
                    for p in r.runs.stream(t, "refund", input={"messages": [{"role": "user", "content": "Refund order A-1005: arrived broken"}]}):
                        first = first or time.perf_counter() - t0
                    timings["start_stream_first_event"].append(first)
                    timings["start_stream_total"].append(time.perf_counter() - t0)
                    [pend] = b.threads.get_state(t)["interrupts"]
                    cmd = {"resume": {pend["id"]: {"decisions": [{"type": "approve"}]}}}
                    t0 = time.perf_counter()
                    if i % 3 == 0:
                        run = b.runs.create(t, "refund", command=cmd); b.runs.join(t, run["run_id"])
                        timings["create_join"].append(time.perf_counter() - t0)
                    elif i % 3 == 1:
                        b.runs.wait(t, "refund", command=cmd)
                        timings["wait"].append(time.perf_counter() - t0)
                    else:
                        list(b.runs.stream(t, "refund", command=cmd))
                        timings["stream_resume_total"].append(time.perf_counter() - t0)
            for k, v in timings.items():
                print(f"MEASURE {k}: n={len(v)} p50={statistics.median(v)*1000:.0f} ms max={max(v)*1000:.0f} ms")
        finally:
            server.stop()
