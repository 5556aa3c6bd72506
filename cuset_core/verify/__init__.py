"""Kernel verification tiers (static, compile, CPU execution, GPU) and the sandbox they run in."""
