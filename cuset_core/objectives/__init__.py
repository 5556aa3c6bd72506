"""Training objectives behind one interface: sft, dft, focal, profit and the CuSeT family."""
