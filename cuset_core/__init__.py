"""CuSeT: CUDA-Sensitive Instruction Tuning.

The method and everything ML: data, sensitivity analysis, objectives, training,
generation, verification and evaluation. No web and no database here.
"""

__version__ = "0.1.0"
