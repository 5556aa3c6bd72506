"""``python -m cuset_core.training CONFIG.json``: run one tuning job (see run.py)."""

from cuset_core.training.run import main

raise SystemExit(main())
