"""Task modules; importing this package registers every task with the worker's Celery app."""
