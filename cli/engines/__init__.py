"""The engines: each engine's spec and the options its release accepts, data the catalog reads."""
