"""Tier 0: tools that read a candidate's source text (no compiler, no execution): the preprocessor,
the macro rule, index-width analysis and the static checks."""
