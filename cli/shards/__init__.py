"""Shards on nodes: what runs where, as systemd units, env files and records."""
