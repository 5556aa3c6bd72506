"""Datasets: formats, loading, line-numbered validation, group splits and prompt styles."""
