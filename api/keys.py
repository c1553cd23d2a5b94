"""API keys: the admin routes, and the command line that makes the first key.

``uv run python -m api.keys create --name alice --role reviewer`` prints a new key once (only
its digest is stored); ``list`` shows every key without secrets; ``revoke ID`` ends one.
"""

from __future__ import annotations

import argparse
from typing import Any

from fastapi import APIRouter, Request

from api.auth import Admin
from api.errors import ApiError
from api.models import CreatedKey, ErrorBody, KeyView, NewKey
from core.cli import cli_main
from core.errors import UserError
from core.logs import say
from store.keys import KeyStore, parse_email, parse_groups, parse_roles

router = APIRouter(tags=["keys"])
ERRORS: dict[int | str, dict[str, Any]] = {c: {"model": ErrorBody} for c in (401, 403, 404, 422)}


def _keys(request: Request) -> KeyStore:
    return request.app.state.auth.keys


@router.get("/keys", response_model=list[KeyView], responses=ERRORS)
def list_keys(request: Request, _: Admin) -> list[dict[str, Any]]:
    """Every key: name, roles, when made, revoked, last used; never a secret."""
    return [k.view() for k in _keys(request).list()]


@router.post("/keys", status_code=201, response_model=CreatedKey, responses=ERRORS)
def create_key(body: NewKey, request: Request, _: Admin) -> dict[str, Any]:
    """A new key with a name and roles; the answer is the only time it is shown."""
    try:
        groups = parse_groups(body.groups)
    except UserError as exc:
        raise ApiError(422, "invalid_groups", str(exc)) from None
    try:
        email = parse_email(body.email)
    except UserError as exc:
        raise ApiError(422, "invalid_email", str(exc)) from None
    key, token = _keys(request).create(body.name, parse_roles(body.roles), groups, email)
    return {**key.view(), "key": token}


@router.post("/keys/{key_id}/revoke", response_model=KeyView, responses=ERRORS)
def revoke_key(key_id: str, request: Request, _: Admin) -> dict[str, Any]:
    """Revoke a key at once: every later request with it is 401."""
    try:
        return _keys(request).revoke(key_id[:40]).view()
    except UserError as exc:
        raise ApiError(404, "unknown_key", str(exc)) from None


@cli_main
def main() -> None:
    parser = argparse.ArgumentParser(prog="approval-worker keys", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    create = sub.add_parser("create", help="make a key and print it (once)")
    create.add_argument("--name", required=True, help="whose key (the identity it acts as)")
    create.add_argument(
        "--role",
        action="append",
        required=True,
        help="requester, reviewer, operator or admin (repeat for several)",
    )
    create.add_argument(
        "--group",
        action="append",
        default=[],
        help="a group whose authority the key holds, e.g. finance (repeat for several)",
    )
    create.add_argument(
        "--email", help="where the holder gets approval e-mails (a reviewer's key; optional)"
    )
    sub.add_parser("list", help="every key, without secrets")
    revoke = sub.add_parser("revoke", help="revoke a key by id")
    revoke.add_argument("id")
    args = parser.parse_args()

    from store.db import open_store

    with open_store() as store:
        keys = store.tables.keys()
        if args.command == "create":
            key, token = keys.create(
                args.name, parse_roles(args.role), parse_groups(args.group), args.email
            )
            print(token)
            roles = ", ".join(sorted(key.roles | key.groups))
            say(f"key {key.id} for {key.name} ({roles}): shown once, keep it", err=True)
        elif args.command == "list":
            for k in keys.list():
                state = "revoked" if k.revoked_at else "active"
                groups = ",".join(sorted(k.groups)) or "-"
                roles = ",".join(sorted(k.roles))
                say(f"{k.id}  {k.name}  {roles}  {groups}  {k.email or '-'}  {state}")
        else:
            key = keys.revoke(args.id)
            say(f"revoked {key.id} ({key.name})")


if __name__ == "__main__":
    main()
