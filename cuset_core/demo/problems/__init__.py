"""Reference problems of the demo dataset: read as text by ``cuset_core.demo``, never imported."""
