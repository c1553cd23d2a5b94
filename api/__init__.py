"""The worker's HTTP face: signed inbox webhooks in, the run API, health.

Built by :func:`api.app.create_app` (``webhook.py`` exposes it as ``app``). The claim is committed
before the 2xx goes out and the resume runs after it, so the response never waits for the agent,
and a process killed in between leaves a claimed run that the lease lets ``recover.py`` finish.
:mod:`api.webhooks` verifies and claims deliveries, :mod:`api.runs` is the run API,
:mod:`api.errors` maps every refusal to one error shape, :mod:`api.limits` bounds bodies,
:mod:`api.ops` serves readiness and metrics.
"""
