"""The latency floor: a FastAPI endpoint that verifies the Svix signature and does nothing else.

Served by the same uvicorn with the same flags as ``webhook:app``, so the difference between
the two is what the worker adds (parsing, the claim, the database, background resumes).
"""

import os

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from svix.webhooks import Webhook, WebhookVerificationError

# the bench signs for the path it posts to, /webhooks/vigilator (child_env sets both secrets)
verifier = Webhook(os.environ.get("VIGILATOR_WEBHOOK_SECRET") or os.environ["WEBHOOK_SECRET"])
app = FastAPI()


@app.post("/webhooks/{source}")
async def webhook(source: str, request: Request):
    body = await request.body()
    try:
        verifier.verify(body, dict(request.headers))
    except (WebhookVerificationError, ValueError):
        return JSONResponse({"error": "webhook verification failed"}, status_code=400)
    return JSONResponse({"status": "verified"}, status_code=200)


@app.get("/healthz")
async def healthz():
    return {"status": "ok"}
