"""What an operator watches and keeps: lifecycle notifications sent out, Prometheus metrics,
structured logs with request ids, readiness, and retention of finished runs."""
