"""Tier 2's device boundary: the candidate's host code and its device memory in two processes.

On a GPU, host code cannot touch device memory: it reaches it through copies, and kernels do the
work. On tier 2 without this, device memory is host memory, so a binding could compute the answer
on the host, and the judged outputs were files the candidate's own process wrote. With it
(``VerifySettings.device_boundary``), the candidate side is two processes in one sandbox:

- the device process (:mod:`.server`), the harness the judge started: it holds the inputs and all
  device memory, loads the candidate's extensions without running any of their host code
  (:mod:`.elf`), runs the kernels, and writes the outputs and the kernels-off runs the judge
  reads;
- the host process (:mod:`.client`), forked from it before any candidate data exists: the
  candidate's Python and C++ binding, whose device tensors say "cuda" and hold no data. Torch
  operations, copies and launches cross the socket between them (:mod:`.protocol`).

:mod:`.side` runs the two.
"""
