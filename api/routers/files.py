"""(placeholder: filled by its owner)"""

from fastapi import APIRouter

router = APIRouter()
