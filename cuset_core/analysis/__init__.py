"""CUDA sensitivity: find CUDA code in answers, parse it, mark sensitive spans and regions, align to tokens."""
