"""The service's storage: settings, SQLAlchemy 2.0 models and sessions, shared by api/ and worker/."""
