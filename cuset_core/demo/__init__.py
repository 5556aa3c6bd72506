"""The project's own demo dataset: KernelBench-format problems with CUDA solutions."""
