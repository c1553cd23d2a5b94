"""The settings as one pydantic-settings model, built from the declarations in
:data:`core.settings.SETTINGS` (so the generated reference and this model cannot disagree).

Why a model beside ``Setting.get()``: start-up needs every source read and checked at once by a
maintained library (the environment, ``.env``, and a directory of file-mounted secrets, as
Kubernetes and Docker mount them), with secrets held as ``SecretStr`` so a repr or a validation
error never shows one. A setting is still read where it is used (``LEASE_SECONDS.get()``), so a
test that changes the environment sees the change; :func:`load` therefore exports a value found
only in the secrets directory into the process environment, as ``.env`` is.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, SecretStr, ValidationError, create_model
from pydantic_settings import BaseSettings, SettingsConfigDict

from core.errors import UserError
from core.settings.kinds import Invalid, Setting

SECRETS_DIR_NAME = "SECRETS_DIR"


class _Base(BaseSettings):
    """Environment names are matched exactly (every setting is upper case), an empty value
    means unset (as ``Setting.raw`` has it), and values are parsed by each setting's own
    parser, never JSON-decoded first."""

    model_config = SettingsConfigDict(
        case_sensitive=True,
        env_ignore_empty=True,
        enable_decoding=False,
        extra="ignore",
        validate_default=True,
    )


def _parsing(setting: Setting[Any]) -> Any:
    def parse(raw: Any) -> Any:
        if raw is None or not isinstance(raw, str):
            return raw
        return setting.parse(raw)

    return parse


def _checking_secret(setting: Setting[Any]) -> Any:
    """A secret stays a ``SecretStr``; its parser only checks it."""

    def check(value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            setting.parse(value.get_secret_value())
        return value

    return check


def _field(setting: Setting[Any]) -> tuple[Any, Any]:
    if setting.sensitive:
        kind: Any = Annotated[SecretStr | None, AfterValidator(_checking_secret(setting))]
    else:
        # ``Any``, not the parser's return type: the parser is the check, and a typed field
        # costs a cold start about 45 ms (pydantic-settings asks each type whether it is a
        # Mapping or a Sequence, and a first ``issubclass`` against an ABC walks its subclasses)
        kind = Annotated[Any, BeforeValidator(_parsing(setting))]
    return kind, setting.default


@functools.cache
def settings_model() -> type[BaseSettings]:
    """The model class: one field per declared setting, in declaration order."""
    from core.settings import SETTINGS

    fields = {s.name: _field(s) for s in SETTINGS}
    return create_model("Settings", __base__=_Base, **fields)  # type: ignore[call-overload]


def secrets_dir() -> Path | None:
    raw = os.environ.get(SECRETS_DIR_NAME) or None
    if raw is None:
        return None
    path = Path(raw)
    if not path.is_dir():
        raise UserError(f"{SECRETS_DIR_NAME}={raw!r} is not a directory")
    return path


def sources_seen() -> tuple[Any, ...]:
    """What :func:`load` reads, cheaply: the environment, where ``.env`` and each secret file
    are and when each last changed. The same again means the same settings."""
    files = [Path(".env")]
    folder = os.environ.get(SECRETS_DIR_NAME)
    if folder and os.path.isdir(folder):
        files += sorted(Path(folder).iterdir())
    stamps = []
    for path in files:
        try:
            stat = path.stat()
        except OSError:
            continue
        stamps.append((str(path.absolute()), stat.st_mtime_ns, stat.st_size))
    return tuple(sorted(os.environ.items())), tuple(stamps)


def load() -> BaseSettings:
    """Every setting from the environment, ``.env`` and the secrets directory, checked; the
    first bad one (in declaration order) raises ``UserError`` with the setting's own words."""
    from core.settings import BY_NAME

    folder = secrets_dir()
    env_file = Path(".env") if Path(".env").is_file() else None
    try:
        loaded = settings_model()(_env_file=env_file, _secrets_dir=folder)
    except ValidationError as exc:
        first = exc.errors()[0]
        name = str(first["loc"][0])
        setting = BY_NAME[name]
        error = first.get("ctx", {}).get("error")
        reason = str(error) if isinstance(error, Invalid) else first["msg"]
        raw = first.get("input")
        shown = "" if setting.sensitive or not isinstance(raw, str) else f"={raw!r}"
        raise UserError(f"{name}{shown} {reason}") from None
    if folder is not None:
        _export(loaded, folder)
    return loaded


def _export(loaded: BaseSettings, folder: Path) -> None:
    """A setting given only as a file in the secrets directory goes into the environment, where
    ``Setting.get()`` reads it (the environment wins over a file, as pydantic-settings has it)."""
    for name in type(loaded).model_fields:
        if not os.environ.get(name) and (folder / name).is_file():
            os.environ[name] = (folder / name).read_text().strip()
