"""A typo of any setting is refused, and what platforms and other programs put in the
environment is not: the check is by closeness (:mod:`core.settings.names`), so both directions
are pinned over every declared setting."""

from __future__ import annotations

import pytest

from core.settings import BY_NAME
from core.settings.names import distance, typos

KNOWN = sorted(BY_NAME)


def misspellings(name: str) -> set[str]:
    """A letter dropped, doubled, swapped with its neighbour; an underscore dropped."""
    i = len(name) // 2
    out = {
        name[:i] + name[i + 1 :],
        name[:i] + name[i] + name[i:],
        name[:i] + name[i + 1] + name[i] + name[i + 2 :],
        name.replace("_", "", 1),
        name[:-1],
    }
    return out - set(KNOWN) - {name}


@pytest.mark.parametrize("name", KNOWN)
def test_every_setting_s_typos_are_refused_naming_it(name: str):
    for typo in misspellings(name):
        found = typos({typo: "1"}, [], KNOWN)
        assert [(n, w) for n, w, _ in found] == [(typo, "the environment")], typo
        assert found[0][2] in KNOWN


def test_the_named_typos_suggest_the_setting():
    for typo, meant in [
        ("DATABSE_URL", "DATABASE_URL"),
        ("WEBHOK_SECRET", "WEBHOOK_SECRET"),
        ("LOGFORMAT", "LOG_FORMAT"),
    ]:
        assert typos({typo: "x"}, [], KNOWN) == [(typo, "the environment", meant)]
        assert typos({typo: "x"}, [typo], KNOWN) == [(typo, ".env", meant)]


# What a shell, CI, systemd, Kubernetes, Lambda and common tools set beside the settings.
PLATFORM = """PATH HOME HOSTNAME LANG LC_ALL TERM SHELL USER LOGNAME PWD OLDPWD TZ TMPDIR SHLVL _
PYTHONPATH PYTHONUNBUFFERED PYTHONDONTWRITEBYTECODE VIRTUAL_ENV UV_CACHE_DIR WEB_CONCURRENCY
FORWARDED_ALLOW_IPS KUBERNETES_SERVICE_HOST KUBERNETES_SERVICE_PORT KUBERNETES_SERVICE_PORT_HTTPS
KUBERNETES_PORT_443_TCP KUBERNETES_PORT_443_TCP_ADDR KUBERNETES_PORT_443_TCP_PROTO
APPROVAL_WEBHOOK_SERVICE_HOST APPROVAL_WEBHOOK_SERVICE_PORT APPROVAL_WEBHOOK_SERVICE_PORT_HTTP
APPROVAL_WEBHOOK_PORT_80_TCP APPROVAL_WEBHOOK_PORT_80_TCP_ADDR APPROVAL_WEBHOOK_PORT_80_TCP_PORT
NOTIFY_SOCKET INVOCATION_ID JOURNAL_STREAM LISTEN_FDS LISTEN_PID RUNTIME_DIRECTORY
STATE_DIRECTORY LOGS_DIRECTORY CREDENTIALS_DIRECTORY WATCHDOG_USEC MAINPID SYSTEMD_EXEC_PID
AWS_REGION AWS_DEFAULT_REGION AWS_EXECUTION_ENV AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY
AWS_SESSION_TOKEN AWS_LAMBDA_FUNCTION_VERSION AWS_LAMBDA_FUNCTION_MEMORY_SIZE
AWS_LAMBDA_LOG_GROUP_NAME AWS_LAMBDA_LOG_STREAM_NAME AWS_LAMBDA_RUNTIME_API LAMBDA_TASK_ROOT
LAMBDA_RUNTIME_DIR _HANDLER _X_AMZN_TRACE_ID LD_LIBRARY_PATH ANTHROPIC_AUTH_TOKEN
ANTHROPIC_SMALL_FAST_MODEL ANTHROPIC_CUSTOM_HEADERS ANTHROPIC_BEDROCK_BASE_URL TEST_DATABASE_URL
REQUIRE_POSTGRES PGHOST PGPORT PGUSER PGPASSWORD PGDATABASE POSTGRES_PASSWORD POSTGRES_DB
SLACK_WEBHOOK_URL SMTP_SERVER SMTP_USER SSL_CERT_FILE REQUESTS_CA_BUNDLE HTTP_PROXY NO_PROXY
http_proxy prometheus_multiproc_dir CI GITHUB_ACTIONS GITHUB_TOKEN SENTRY_DSN OTEL_SERVICE_NAME
""".split()


def test_what_platforms_set_is_left_alone():
    env = {name: "x" for name in PLATFORM}
    env["APPROVAL_WEBHOOK_PORT"] = "tcp://127.0.0.1:80"  # a Kubernetes service link
    assert typos(env, [], KNOWN) == []


def test_distance_counts_a_swap_as_one_edit():
    assert distance("DATABSAE_URL", "DATABASE_URL") == 1
    assert distance("DATABSE_URL", "DATABASE_URL") == 1
    assert distance("ABC", "ABC") == 0


def test_a_limited_distance_agrees_up_to_its_limit():
    pairs = [("DATABSAE_URL", "DATABASE_URL"), ("SQLITE_PTAH", "SQLITE_PATH"), ("HOME", "HOST")]
    pairs += [("PATH", "SQLITE_PATH"), ("LEASE_SECONDS", "LEASE_SECNODS_X"), ("AB", "BA")]
    for a, b in pairs:
        for limit in (0, 1, 2, 3):
            assert distance(a, b, limit) == min(distance(a, b), limit + 1), (a, b, limit)
