"""The worker's HTTP face: signed inbox webhooks in, the run API, health.

Built by :func:`api.app.create_app` (``webhook.py`` exposes it as ``app``), which opens nothing:
the settings, secrets and store are checked and opened at start-up (its lifespan, or
:func:`api.app.start` where no lifespan runs). Handlers that query or resume are plain ``def``
(the thread pool) or hand that work to a thread, so one slow resume never stalls the event loop
and every other request on the process with it. The claim is committed
before the 2xx goes out and the resume runs after it, so the response never waits for the agent,
and a process killed in between leaves a claimed run that the lease lets ``recover.py`` finish.
:mod:`api.webhooks` verifies and claims deliveries, :mod:`api.runs` is the run API,
:mod:`api.errors` maps every refusal to one error shape, :mod:`api.limits` bounds bodies,
:mod:`api.ops` serves readiness and metrics.
"""
