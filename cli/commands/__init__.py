"""Commands: parse options, call the core through the edges, render. Nothing else."""
