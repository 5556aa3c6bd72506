"""(placeholder: the dashboard pages, filled by its owner)"""

from fastapi import APIRouter, FastAPI

router = APIRouter(include_in_schema=False)


def mount_static(app: FastAPI) -> None:
    """Serve the dashboard's vendored static files."""
