"""Request and response models, one module per domain (the OpenAPI schema is built from them)."""
