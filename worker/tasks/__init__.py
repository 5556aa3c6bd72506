"""Task modules; a worker imports them at start (``include`` in worker/app.py), which registers their tasks."""
