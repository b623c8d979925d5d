"""The catalog: which models should run, and the profiles they may run as."""
