"""The FastAPI application: routers by domain under /v1, one error shape, the dashboard."""
