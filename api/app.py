"""The FastAPI app: wiring, the one error shape, health."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import ExitStack, asynccontextmanager, contextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException

from api.auth import Authenticator
from api.errors import ApiError, error_response, refused
from api.lazy import LazyRoutes, Once
from api.limits import AuthFirst, BodyLimit, CleanUrl, StrictJson
from api.ops import database_gauges, is_outage, outage_errors
from api.serverless import attach_resumer, close_resumers, open_resumers
from api.webhooks import router as webhooks_router
from api.webhooks import webhook_verifiers
from core import settings, shutdown, version
from core.cli import exit_refused, prepare
from core.errors import UserError
from core.logs import configure_logging
from ops import channels
from ops.http import RequestContext
from store.db import open_store
from worker.refusals import Refused
from worker.runner import Runner


@contextmanager
def resources(app: FastAPI) -> Iterator[Runner]:
    """Open what the routes serve from and hang it on ``app.state``, for as long as the block
    runs. Here rather than in :func:`create_app` so that importing the app reads no secret and
    opens no database: a bad setting raises ``UserError`` at start-up instead."""
    configure_logging("INFO")  # a server logs each request and transition by default
    verifiers = webhook_verifiers()
    with open_store() as store:  # a bad DATABASE_URL stops start-up with one line
        # a request's round trip that gets no answer in time is cut: 503, not a hang
        store.cut_after(settings.DATABASE_POOL_TIMEOUT.get())
        runner = Runner(store, senders=channels.senders())
        app.state.runner = runner
        app.state.verifiers = verifiers
        app.state.auth = Authenticator(store.tables.keys())
        app.state.gauges = database_gauges(store)  # before the resumers: they count for it
        try:
            open_resumers(runner)
            attach_resumer(runner)  # every decision's claim wakes them at once
            yield runner
        finally:
            close_resumers(runner)  # resumes taken finish before the store closes
            runner.inbox.shutdown()


def start(app: FastAPI) -> Callable[[], None]:
    """Open the app's resources now, for a host that runs no lifespan (Lambda under Mangum,
    which would run one around every event); returns what closes them."""
    stack = ExitStack()
    stack.enter_context(resources(app))
    return stack.close


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """uvicorn's start-up: settings and secrets are checked as every entry point checks them;
    a refusal is one ``error:`` line and exit 2 (1 when the database cannot be reached), not
    uvicorn's traceback and exit 3."""
    stack = ExitStack()
    try:
        prepare()
        shutdown.on_sigterm()  # before uvicorn's own: long-polls end, resumes get the deadline
        stack.enter_context(resources(app))
    except UserError as exc:
        stack.close()
        # a --workers child: uvicorn's start-up failure code stops its supervisor, which
        # would restart a child that exits 2 forever
        import multiprocessing

        exit_refused(exc, 3 if multiprocessing.parent_process() else exc.exit_code)
    with stack:
        yield


def create_app(lazy: bool = False) -> FastAPI:
    """The app, with nothing opened yet: :func:`lifespan` (or :func:`start`) opens it.
    ``lazy`` (the Lambda handler): the routes past the webhooks' are imported and built on the
    first request the webhooks' do not answer (:class:`api.lazy.LazyRoutes`), so a cold start
    that answers a delivery does not pay for them."""
    app = FastAPI(
        title="approval-worker",
        version=version.current(),
        description="Durable human-in-the-loop approvals for LangGraph agents. Every call but "
        "the signed webhooks, e-mail links and `/healthz` needs `Authorization: Bearer <API key "
        "or JWT>` (under `/lg/`, LangGraph's clients' API, an API key may come as `x-api-key`) "
        'with a role; every refusal is `{"error": {"code", "message"}}` (with `details` where it '
        "has ids or times).",
        lifespan=lifespan,
    )
    rest = Once(lambda: _include_rest(app))
    if lazy:
        app.add_middleware(LazyRoutes, eager=webhooks_router.routes, complete=rest)
        schema = app.openapi

        def openapi() -> dict[str, Any]:  # the schema describes every route
            rest()
            return schema()

        app.openapi = openapi  # type: ignore[method-assign]
    app.add_middleware(StrictJson)
    app.add_middleware(BodyLimit)  # bounds what StrictJson reads
    app.add_middleware(AuthFirst)  # no API body is read for a caller without a credential
    app.add_middleware(CleanUrl)
    app.add_middleware(RequestContext)  # outermost: every response gets X-Request-ID
    app.include_router(webhooks_router)  # first: LazyRoutes relies on it

    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> JSONResponse:
        return error_response(exc.status, exc.code, exc.message, exc.headers, exc.details)

    @app.exception_handler(Refused)
    async def refusal(request: Request, exc: Refused) -> JSONResponse:
        error = refused(exc)
        return error_response(error.status, error.code, error.message, details=error.details)

    @app.exception_handler(UserError)
    async def user_error(request: Request, exc: UserError) -> JSONResponse:
        return error_response(422, "invalid", str(exc))

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return error_response(exc.status_code, code, str(exc.detail), getattr(exc, "headers", None))

    async def outage(request: Request, exc: Exception) -> JSONResponse:
        if not is_outage(exc):
            raise exc
        # the database is down or locked: say so quickly, the caller retries later
        return error_response(503, "unavailable", "the database is unavailable; retry later")

    for kind in outage_errors():
        app.add_exception_handler(kind, outage)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body") or "body"
        message = str(first.get("msg", "invalid request"))[:300]
        return error_response(422, "invalid", f"{where[:200]}: {message}")

    if not lazy:
        rest()
    return app


def _include_rest(app: FastAPI) -> None:
    """Every route after the webhooks', in order (imported here: see ``create_app(lazy)``)."""
    from api.audit import router as audit_router
    from api.delegations import router as delegations_router
    from api.halts import router as halts_router
    from api.keys import router as keys_router
    from api.langgraph_api import router as langgraph_router
    from api.mail import router as mail_router
    from api.ops import router as ops_router
    from api.pages import STATIC
    from api.pages import router as pages_router
    from api.runs import router as runs_router
    from api.slack import router as slack_router
    from api.slack_links import router as slack_links_router

    app.include_router(slack_router)
    app.include_router(slack_links_router)
    app.include_router(langgraph_router)
    app.include_router(mail_router)
    app.include_router(runs_router)
    app.include_router(keys_router)
    app.include_router(delegations_router)
    app.include_router(ops_router)
    app.include_router(audit_router)
    app.include_router(halts_router)
    app.include_router(pages_router)
    app.mount("/inbox/static", StaticFiles(directory=STATIC), name="inbox-static")

    @app.get("/healthz", tags=["health"], response_model=None)
    def healthz(request: Request) -> dict[str, str]:
        """Liveness only: the process answers (no query). The database is ``/readyz``'s job."""
        store = request.app.state.runner.store
        return {"status": "ok", "database": store.backend, "version": version.current()}
