"""Placement: the highest-priority profile that fits, and why every other candidate did not."""
