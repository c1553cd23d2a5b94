"""What an operator watches and keeps: lifecycle notifications sent out, Prometheus metrics,
request ids on every response, readiness, and retention of finished runs."""
