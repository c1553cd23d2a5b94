"""Who is calling: an API key or a JWT in ``Authorization: Bearer`` (or, under ``/lg/``, an
API key in ``x-api-key``, as LangGraph's clients send it), turned into a
:class:`core.identity.Principal` (identity, credential, roles and groups as of now,
provenance); 401 without a valid credential, 403 without the role.

The principal's name is the identity of everything the caller does (a decision's approver, a
run's requester): no request body can choose it. Failures are logged with the reason and the
key id at most, never the credential.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import Depends, Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from api.errors import ApiError
from api.limits import PRINCIPAL
from core import settings
from core.errors import UserError
from core.identity import Principal, Provenance
from core.limits import check_name
from store.keys import KeyStore, Role, split_token

log = logging.getLogger(__name__)


# Where a key may come as ``x-api-key``, as LangGraph's clients send it (``api.langgraph_api``)
X_API_KEY_PATHS = ("/lg/",)


def _unauthorized(message: str) -> ApiError:
    return ApiError(401, "unauthorized", message, {"WWW-Authenticate": "Bearer"})


class Authenticator:
    """Checks bearer credentials: API keys always, JWTs when a provider is configured."""

    def __init__(self, keys: KeyStore):
        self.keys = keys
        self.jwt = JwtVerifier.from_settings()

    def principal(self, request: Request) -> Principal:
        checked = request.scope.get(PRINCIPAL)  # by AuthFirst, before the body was read
        if isinstance(checked, Principal):
            return checked
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        token = token.strip()
        if not header and request.scope.get("path", "").startswith(X_API_KEY_PATHS):
            scheme, token = "bearer", request.headers.get("x-api-key", "").strip()
            if token and split_token(token) is None:  # LangGraph clients send keys, not JWTs
                raise _unauthorized("x-api-key must be an API key (aw_...)")
        if scheme.lower() != "bearer" or not token:
            raise _unauthorized("send a credential: Authorization: Bearer <API key or JWT>")
        if split_token(token) is not None:
            key = self.keys.verify(token)
            if key is None:
                log.warning("refused API key %s: unknown, wrong or revoked", token[3:15])
                raise _unauthorized("the API key is unknown, wrong or revoked")
            return Principal(key.name, key.roles, f"key:{key.id}", Provenance.API_KEY, key.groups)
        if self.jwt is None:
            log.warning("refused a bearer token that is not an API key (no JWT provider set)")
            raise _unauthorized("the credential is not a valid API key")
        return self.jwt.verify(token)


def require(request: Request, *roles: Role) -> Principal:
    """The caller, if they hold one of ``roles`` (admin holds all)."""
    auth: Authenticator = request.app.state.auth
    principal = auth.principal(request)
    if not principal.has(*roles):
        log.warning("refused %s (%s): needs %s", principal.via, principal.name, "/".join(roles))
        raise ApiError(403, "forbidden", f"this needs the role {' or '.join(roles)}")
    request.state.principal = principal
    return principal


Credentials = HTTPAuthorizationCredentials | None
_bearer = HTTPBearer(auto_error=False, description="an API key (aw_...) or a JWT")


def role(*roles: Role) -> Callable[..., Principal]:
    """A route dependency: the caller, who must hold one of ``roles`` (documents the bearer
    scheme in the OpenAPI schema)."""

    def dependency(request: Request, _: Annotated[Credentials, Security(_bearer)]) -> Principal:
        return require(request, *roles)

    return dependency


Requester = Annotated[Principal, Depends(role(Role.REQUESTER))]
Reviewer = Annotated[Principal, Depends(role(Role.REVIEWER))]
Operator = Annotated[Principal, Depends(role(Role.OPERATOR))]
Admin = Annotated[Principal, Depends(role(Role.ADMIN))]
Reader = Annotated[Principal, Depends(role(Role.REQUESTER, Role.REVIEWER, Role.OPERATOR))]


class JwtVerifier:
    """Bearer JWTs from an identity provider: issuer, audience, expiry and signature checked;
    keys from ``JWT_JWKS_URL`` (cached) or ``JWT_PUBLIC_KEY``."""

    def __init__(self, *, issuer: str, audience: str, jwks_url: str | None, public_key: str | None):
        import jwt

        self._jwt = jwt
        self.issuer, self.audience = issuer, audience
        self.algorithms = settings.JWT_ALGORITHMS.get()
        self.user_claim = settings.JWT_USER_CLAIM.get()
        self.roles_claim = settings.JWT_ROLES_CLAIM.get()
        self.groups_claim = settings.JWT_GROUPS_CLAIM.get()
        self._public_key = public_key
        self._jwks = (
            jwt.PyJWKClient(jwks_url, cache_keys=True, lifespan=300, timeout=5)
            if jwks_url
            else None
        )

    @classmethod
    def from_settings(cls) -> JwtVerifier | None:
        issuer, audience = settings.JWT_ISSUER.get(), settings.JWT_AUDIENCE.get()
        jwks_url, public_key = settings.JWT_JWKS_URL.get(), settings.JWT_PUBLIC_KEY.get()
        if not (issuer or audience or jwks_url or public_key):
            return None
        if not (issuer and audience and (jwks_url or public_key)):
            raise UserError(
                "a JWT provider needs JWT_ISSUER, JWT_AUDIENCE and JWT_JWKS_URL or JWT_PUBLIC_KEY"
            )
        return cls(issuer=issuer, audience=audience, jwks_url=jwks_url, public_key=public_key)

    def verify(self, token: str) -> Principal:
        jwt = self._jwt
        try:
            key: Any = (
                self._jwks.get_signing_key_from_jwt(token).key
                if self._jwks is not None
                else self._public_key
            )
            claims = jwt.decode(
                token,
                key,
                algorithms=self.algorithms,
                audience=self.audience,
                issuer=self.issuer,
                options={"require": ["exp", "iss", "aud"]},
                leeway=30,
            )
        except (jwt.PyJWTError, ValueError) as exc:
            log.warning("refused a JWT: %s", type(exc).__name__)
            raise _unauthorized(f"the token was refused ({type(exc).__name__})") from None
        name = claims.get(self.user_claim)
        raw_roles = claims.get(self.roles_claim, [])
        # strictly a list of names: a dict would grant its keys, a string its letters
        if not isinstance(raw_roles, list) or not all(isinstance(r, str) for r in raw_roles):
            log.warning("refused a JWT: its %s claim is not a list of names", self.roles_claim)
            raise _unauthorized(f"the token's {self.roles_claim!r} claim must be a list of names")
        roles = frozenset(Role(v) for v in raw_roles if v in set(Role))
        if not isinstance(name, str) or not name.strip():
            raise _unauthorized(f"the token has no {self.user_claim!r} claim naming the user")
        try:
            user = check_name(name, f"the token's {self.user_claim!r} claim")
        except UserError as exc:
            raise _unauthorized(str(exc)) from None
        expires = claims.get("exp")
        until = float(expires) if isinstance(expires, int | float) else None
        return Principal(user, roles, "jwt", Provenance.JWT, self._groups(claims), until)

    def _groups(self, claims: dict[str, Any]) -> frozenset[str]:
        """The groups claim, strictly: absent is none; anything but a list of short strings is
        refused (a provider sending one string or an object is misconfigured, and guessing
        would grant or drop authority silently)."""
        raw = claims.get(self.groups_claim)
        if raw is None:
            return frozenset()
        if (
            not isinstance(raw, list)
            or len(raw) > 100
            or not all(isinstance(g, str) and 0 < len(g.strip()) <= 100 for g in raw)
        ):
            log.warning("refused a JWT: its %r claim is not a list of names", self.groups_claim)
            raise _unauthorized(
                f"the token's {self.groups_claim!r} claim must be a list of group names"
            )
        return frozenset(g.strip() for g in raw)
