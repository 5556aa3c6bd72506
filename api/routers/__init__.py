"""One router per domain, all under /v1 except health."""
