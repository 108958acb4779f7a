"""The `stats` family: a statistic computed from a data file by a Python script, checked by tolerance."""
