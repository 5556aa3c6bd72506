"""Evaluation: run a model (or given answers) over a problem set and score it."""
