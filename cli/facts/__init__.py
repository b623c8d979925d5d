"""Node facts: what a node is and what runs on it, as the probe reports it."""
