"""Routes: which replicas answer each model and alias, and the router configuration for it.

`table` (pure) computes the routing table from the catalog and a snapshot; `litellm` (pure)
renders it as a LiteLLM proxy configuration; `deploy` (an edge) puts that configuration on
the inventory's `routers` with a playbook.
"""
