"""The terminal: the only package that imports rich."""
