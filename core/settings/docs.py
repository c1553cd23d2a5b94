"""The settings reference (``docs/reference/settings.md``) and ``.env.example``, generated from
the declarations (``uv run python -m core.settings --write``)."""

from __future__ import annotations

import re
from typing import Any

from core.settings import SETTINGS, Setting


def _default(setting: Setting[Any]) -> str:
    if setting.shown is not None:
        return setting.shown
    return "unset" if setting.default is None else f"`{setting.default}`"


def markdown_table() -> str:
    rows = ["| setting | default | meaning |", "| --- | --- | --- |"]
    rows += [f"| `{s.name}` | {_default(s)} | {s.meaning} |" for s in SETTINGS]
    return "\n".join(rows) + "\n"


def env_example() -> str:
    out = [
        "# Copy to .env (read from the working directory; real environment variables win).",
        "# Generated from core/settings.py by `uv run python -m core.settings --write`.",
        "# Every line is commented out, so each setting keeps its default until you set it.",
    ]
    group = None
    for s in SETTINGS:
        if s.group != group:
            group = s.group
            out += ["", f"# --- {group} " + "-" * (94 - len(group))]
        out.append(f"# {re.sub(r'`', '', s.meaning)}")
        value = s.example if s.example is not None else s.default
        out.append(f"# {s.name}={value}")
    return "\n".join(out) + "\n"


PAGE = "docs/reference/settings.md"  # where the table lives, between its markers
README_START, README_END = "<!-- settings:start -->\n", "<!-- settings:end -->\n"


def readme_with_table(readme: str) -> str:
    """``readme`` with the generated table between its settings markers."""
    head, _, rest = readme.partition(README_START)
    _, _, tail = rest.partition(README_END)
    return head + README_START + markdown_table() + README_END + tail


def main(argv: list[str] | None = None) -> None:
    """``--env``: print ``.env.example``; ``--write``: rewrite it and the docs' table."""
    import sys
    from pathlib import Path

    args = sys.argv[1:] if argv is None else argv
    if args == ["--write"]:
        root = Path(__file__).resolve().parents[2]
        (root / ".env.example").write_text(env_example())
        page = root / PAGE
        page.write_text(readme_with_table(page.read_text()))
        return
    print(env_example() if args == ["--env"] else markdown_table(), end="")
