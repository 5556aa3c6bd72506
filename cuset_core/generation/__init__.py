"""Generation: prompts (KernelBench and compact), sampling and code extraction."""
