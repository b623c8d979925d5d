"""Fakes of node-side tools and services for the tests.

`nvidia_smi` is the fake installed into the local test fleet's GPU nodes (the fleet itself
is the package tests/testfleet).
"""
