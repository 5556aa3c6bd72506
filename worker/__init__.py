"""Celery workers: thin tasks that call cuset_core and record to db/."""
