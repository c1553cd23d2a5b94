"""AWS Lambda entry points (see deploy/aws/template.yaml):

lambda_handler.handler     the HTTP app (API Gateway HTTP API or Function URL events)
lambda_handler.scheduled   one recovery pass (an EventBridge schedule), returns a JSON summary
"""

from core import coldstart

coldstart.pause()  # until the first event is answered: see core/coldstart.py

from api.serverless import http_handler, scheduled_handler  # noqa: E402

handler = http_handler
scheduled = scheduled_handler
