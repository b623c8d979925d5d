"""The fleet as placement sees it: nodes, their status, and what holds their GPUs."""
