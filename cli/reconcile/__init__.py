"""Reconcile: the catalog's desired replicas against the shards the nodes report."""
