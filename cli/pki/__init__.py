"""The fleet's certificate authority and node certificates.

`certs` is pure (certificates built from keys, names, serials and a clock, all given).
The rest are edges: `store` keeps the CA's files and refuses ones others could read;
`node` holds the scripts run on the node (over cli.edges.ssh, which fetches a host key
before logging in and logs in pinned to it); `addhost` adds the host to the inventory;
`onboard` runs the steps of `ctl onboard-node` in order.
"""
