"""Grow the fleet on Proxmox VE: `ctl provision-node` (docs/provisioning.md).

- `plan`: the pure part. Options are validated and turned into the API calls to make, in
  order, with their parameters encoded as Proxmox wants them; answers (UPIDs, task
  statuses, guest-agent interfaces, drive sizes) are read back. No I/O.
- `api`: the small interface the steps need (one generic call), and its errors.
- `proxmox`: that interface over proxmoxer and HTTPS, and where the API token comes from.

The steps (bounded waits, idempotence by name, the cleanup that destroys only a VM
proven to be the run's own) are `cli/ops/provision.py`.
"""
