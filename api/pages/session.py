"""Sign-in, sessions and CSRF for the pages: a credential is checked once by the API's
Authenticator, then a server-side session (cookie ``aw_session``: HttpOnly, SameSite=Lax, Secure
over https) carries the identity; every POST must return the session's CSRF token.

The session is looked up on every request and its API key re-checked, so revoking a key signs its
browser sessions out at once; a JWT session lasts at most ``SESSION_HOURS``.
"""

from __future__ import annotations

import hmac
import secrets
import time
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import parse_qs, quote

from fastapi import APIRouter, Depends, Request
from fastapi.responses import RedirectResponse, Response
from markupsafe import Markup

from api.auth import Authenticator
from api.errors import ApiError
from api.pages.forms import LABELS
from api.throttle import throttle
from core import settings
from core.identity import identity_key
from store.keys import split_token
from store.sessions import SessionStore, WebSession
from worker.runner import Runner

router = APIRouter()
COOKIE = "aw_session"
LOGIN_COOKIE = "aw_login"  # double-submit token of the sign-in form (before any session)


def _duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    for size, unit in ((86400, "d"), (3600, "h"), (60, "min")):
        if seconds >= size:
            return f"{seconds // size} {unit}"
    return f"{seconds} s"


def _left(seconds: float) -> str:
    return f"{_duration(seconds)} left" if seconds > 0 else "past due"


def _stamp(at: float | None) -> str:
    """A moment in ``DISPLAY_TIMEZONE``, its zone named (the reader's own is not known here)."""
    from core.moments import moment

    return "" if at is None else moment(at)


def _when(at: float | None) -> Markup:
    """A moment, relative and absolute: in ``DISPLAY_TIMEZONE`` from the server, the viewer's
    own time zone once the page's script runs (it rewrites each ``<time>``)."""
    if at is None:
        return Markup("")
    delta = at - time.time()
    relative = f"in {_duration(delta)}" if delta > 0 else f"{_duration(-delta)} ago"
    iso = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))
    return Markup('<time datetime="{}" data-at="{}">{} ({})</time>').format(
        iso, int(at), _stamp(at), relative
    )


def zoned(text: str, details: dict[str, str]) -> Markup:
    """A refusal's words with each moment of its ``details`` (``decided_at``: ISO 8601 UTC) as a
    ``<time>`` the page's script writes in the viewer's own zone (the display zone until then)."""
    from datetime import datetime

    from core.moments import moment

    out = Markup.escape(text)
    for key, value in details.items():
        if not key.endswith("_at"):
            continue
        at = datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        words = Markup.escape(moment(at))
        stamp = Markup('<time datetime="{}" data-at="{}" data-plain>{}</time>')
        out = Markup(out.replace(words, stamp.format(value, int(at), moment(at))))
    return out


def _plain(value: object) -> str:
    """A form value as typed by a person: ``329.00``, not ``329.0``; nothing for None."""
    if value is None:
        return ""
    if isinstance(value, float) and round(value, 2) == value:
        return f"{value:.2f}"
    return str(value)


@cache
def templates() -> Any:
    """The page templates, loaded on the first page served (Jinja2 is most of what the pages
    cost to import, and a webhook delivery or an API call never renders one)."""
    from fastapi.templating import Jinja2Templates

    loaded = Jinja2Templates(directory=Path(__file__).resolve().parent.parent / "templates")
    filters = {"duration": _duration, "left": _left, "stamp": _stamp, "when": _when}
    loaded.env.filters.update(filters, plain=_plain)
    loaded.env.globals.update(now=time.time, labels=LABELS)
    return loaded


@dataclass(frozen=True)
class Viewer:
    """Who is looking at a page, and what their roles let them do there."""

    session_id: str
    session: WebSession

    @property
    def name(self) -> str:
        return self.session.principal

    @property
    def via(self) -> str:
        return self.session.via

    @property
    def key(self) -> str:
        return identity_key(self.session.principal)

    @property
    def groups(self) -> list[str]:
        return list(self.session.groups)

    def has(self, *roles: str) -> bool:
        return "admin" in self.session.roles or any(r in self.session.roles for r in roles)

    @property
    def can_decide(self) -> bool:
        return self.has("reviewer") and settings.INBOX.get() == "local"

    @property
    def sees_all(self) -> bool:
        return self.has("reviewer", "operator")

    def is_requester_of(self, name: str | None) -> bool:
        return name is not None and identity_key(name) == self.key

    @property
    def csrf(self) -> str:
        return self.session.csrf


def runner(request: Request) -> Runner:
    return request.app.state.runner


def locale(request: Request) -> str:
    """How the reviewer writes numbers: their browser's first language Babel knows."""
    from core.money import preferred_locale

    return preferred_locale(request.headers.get("accept-language"))


def sessions(request: Request) -> SessionStore:
    return runner(request).store.tables.sessions()


def secure(request: Request) -> bool:
    """Mark cookies Secure when the browser reached us over https (as a trusted proxy says)."""
    if settings.TRUST_PROXY_HEADERS.get():
        forwarded = request.headers.get("x-forwarded-proto", "").split(",")[0].strip()
        if forwarded:
            return forwarded == "https"
    return request.url.scheme == "https"


def viewer(request: Request) -> Viewer | None:
    session_id = request.cookies.get(COOKIE)
    if not session_id:
        return None
    session = sessions(request).get(session_id)
    return None if session is None else Viewer(session_id, session)


def to_login(request: Request) -> RedirectResponse:
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return RedirectResponse(f"/inbox/login?next={quote(target, safe='')}", status_code=303)


async def form(request: Request) -> dict[str, str]:
    """The posted form (urlencoded), last value per field; no multipart is needed here."""
    body = (await request.body()).decode("utf-8", errors="replace")
    return {k: v[-1] for k, v in parse_qs(body, keep_blank_values=True).items()}


# A POST handler takes the form as this dependency and is a plain ``def``: the body is read on
# the event loop, then the handler's database calls and resumes run in the thread pool.
Posted = Annotated[dict[str, str], Depends(form)]


def csrf_ok(fields: dict[str, str], expected: str) -> bool:
    return hmac.compare_digest(fields.get("csrf", "").encode(), expected.encode())


def render(
    request: Request, name: str, context: dict[str, Any], status: int = 200, **kw: Any
) -> Response:
    context = {"readonly_inbox": settings.INBOX.get() != "local", **context}
    return templates().TemplateResponse(request, name, context, status_code=status, **kw)


def forbidden_csrf(request: Request, who: Viewer | None) -> Response:
    message = "The form was refused: its security token is missing or out of date (CSRF). "
    message += "Reload the page and try again."
    return render(request, "error.html", {"who": who, "message": message}, 403)


def _safe_next(target: str | None) -> str:
    """Only a path inside the inbox: never an open redirect to another site."""
    if target and target.startswith("/inbox") and not target.startswith("//"):
        return target
    return "/inbox"


def _login_page(request: Request, error: str | None, status: int, nxt: str) -> Response:
    token = secrets.token_urlsafe(24)
    response = render(
        request, "login.html", {"who": None, "error": error, "token": token, "next": nxt}, status
    )
    response.set_cookie(
        LOGIN_COOKIE, token, httponly=True, samesite="lax", secure=secure(request), path="/inbox"
    )
    return response


@router.get("/inbox/login")
def login_page(request: Request, next: str | None = None) -> Response:
    return _login_page(request, None, 200, _safe_next(next))


@router.post("/inbox/login")
def login(request: Request, fields: Posted) -> Response:
    nxt = _safe_next(fields.get("next"))
    credential = fields.get("credential", "").strip()
    key = split_token(credential)  # guesses at one key's secret count against that key too
    throttle(request, "logins", settings.RATE_LIMIT_LOGINS, *([f"key:{key[0]}"] if key else []))
    if not csrf_ok(fields, request.cookies.get(LOGIN_COOKIE) or "\0"):
        return _login_page(request, "The sign-in form expired; please try again.", 403, nxt)
    auth: Authenticator = request.app.state.auth
    fake = Request(
        {**request.scope, "headers": [(b"authorization", f"Bearer {credential}".encode())]}
    )
    try:
        principal = auth.principal(fake)
    except ApiError as exc:
        return _login_page(request, f"Sign-in refused: {exc.message}.", 401, nxt)
    if not principal.roles:
        return _login_page(request, "Sign-in refused: the credential has no role.", 403, nxt)
    seconds = settings.SESSION_HOURS.get() * 3600
    if principal.expires_at is not None:  # a JWT session ends with its token
        seconds = min(seconds, principal.expires_at - time.time())
    if seconds <= 0:
        return _login_page(request, "Sign-in refused: the token has expired.", 401, nxt)
    session_id, _ = sessions(request).create(
        principal.name,
        [str(r) for r in principal.roles],
        principal.via,
        seconds,
        tuple(principal.groups),
    )
    response = RedirectResponse(nxt, status_code=303)
    response.set_cookie(
        COOKIE,
        session_id,
        max_age=int(seconds),
        httponly=True,
        samesite="lax",
        secure=secure(request),
        path="/inbox",
    )
    response.delete_cookie(LOGIN_COOKIE, path="/inbox")
    return response


@router.post("/inbox/logout")
def logout(request: Request, posted: Posted) -> Response:
    who = viewer(request)
    if who is None:
        return RedirectResponse("/inbox/login", status_code=303)
    if not csrf_ok(posted, who.csrf):
        return forbidden_csrf(request, who)
    sessions(request).delete(who.session_id)
    response = RedirectResponse("/inbox/login", status_code=303)
    response.delete_cookie(COOKIE, path="/inbox")
    return response
