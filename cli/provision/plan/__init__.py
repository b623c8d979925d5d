"""What `ctl provision-node` asks of Proxmox, worked out from the options alone.

Four modules: `options` (checked), `params` (encoded), `calls` (built), `answers` (read);
this package gives their public names in one place.

Pure: no I/O, no proxmoxer. The options are checked here (every problem at once, exit 2
and nothing sent), each API call is built here with its parameters encoded as Proxmox
wants them, and the answers the steps depend on are read here: UPIDs, task statuses,
drive sizes, the guest agent's interfaces. `--dry-run` prints the same calls the executor
makes (with placeholders for what only Proxmox can tell: the vmid, the UPID, the disk).

Proxmox rules followed here, with where they come from:

- booleans are `0`/`1` and nothing else (pve-common PVE/JSONSchema.pm, check_type);
- a vmid is 100..999999999 (PVE/JSONSchema.pm, standard option `pve-vmid`);
- a VM name is a DNS name (PVE/JSONSchema.pm, `pve_verify_dns_name`; clone_vm's `name`);
- `sshkeys` must itself be URL-encoded (qemu-server: format `urlencoded`, checked against
  `^[-%a-zA-Z0-9_.!~*'()]*$` by `pve_verify_urlencoded`, then `uri_unescape`d and each
  line checked by `PVE::Tools::validate_ssh_public_keys`): the value is percent-encoded
  once here and the HTTP client form-encodes it a second time;
- `ipconfig0` is `ip=dhcp` or `ip=CIDR[,gw=IP]`, the CIDR an IPv4 network with a prefix
  of 8 to 32 (qemu-server `$ipconfig_fmt`; pve-common `pve_verify_cidrv4`);
- a GPU is `hostpciN: mapping=NAME,pcie=1` with `machine: q35` (qemu-server
  PVE/QemuServer/PCI.pm `$hostpci_fmt`: `pcie` needs q35; the mapping id is a
  `pve-configid`); a raw `host=` PCI id is passed on as given, and Proxmox refuses it to
  anyone but root@pam — any API token included (PVE/API2/Qemu.pm, `check_hostpci_perm`);
- sizes are `\\+?\\d+(\\.\\d+)?[KMGT]?` in powers of 1024 (PVE/API2/Qemu.pm resize_vm;
  PVE/JSONSchema.pm `parse_size`/`format_size`);
- a task's `exitstatus` is `OK`, `WARNINGS: N` (both success) or the error text
  (pve-common PVE/UPID.pm `read_status`, `status_is_error`);
- the clone's only free-text parameter is `description` (qemu-server PVE/API2/Qemu.pm
  `clone_vm`: node, vmid, newid, name, description, pool, snapname, storage, format, full,
  target, bwlimit; no `tags`), written into the new config by the clone's own worker: so
  the run's marker, `modelfleet-run-<id>`, goes there. (It would be a valid tag too,
  pve-common PVE/JSONSchema.pm `pve-tag`: `[a-z0-9_][a-z0-9_\\-+.]*`, but a tag could only
  come with the later config update, and a VM whose clone has just ended has none.)
  Proxmox keeps the description as `#` comment lines and gives it back line for line,
  trailing blanks stripped (qemu-server PVE/QemuServer.pm `parse_vm_config`).
"""

from __future__ import annotations

from cli.provision.plan.answers import (
    MARKER_PREFIX,
    Upid,
    boot_disk,
    drive_options,
    drive_size,
    exit_ok,
    found_text,
    human_size,
    marked,
    next_command,
    not_ours,
    not_provisioned,
    parse_nextid,
    parse_size,
    parse_upid,
    pick_address,
    provisioned_marker,
    redact,
    removal_commands,
    run_marker,
    vmid_taken,
)
from cli.provision.plan.calls import (
    BOOT_DISK,
    DESTROY_PARAMS,
    NEW_VMID,
    RUN_ID,
    TASK_LOG_LIMIT,
    UPID,
    ApiCall,
    Method,
    PlannedCall,
    VmRef,
    agent_interfaces_call,
    clone_call,
    config_get_call,
    config_set_call,
    destroy_call,
    dry_run_calls,
    list_vms_call,
    nextid_call,
    resize_call,
    start_call,
    stop_call,
    task_log_call,
    task_status_call,
    vm_status_call,
)
from cli.provision.plan.options import (
    DEFAULT_USER,
    MAX_HOSTPCI,
    MIN_MEMORY_MIB,
    VMID_MAX,
    VMID_MIN,
    DiskSize,
    Gpu,
    ProvisionOptions,
    PublicKey,
    build_options,
    ipconfig0,
    name_problem,
    parse_disk,
    parse_gpu,
    parse_public_keys,
)
from cli.provision.plan.params import (
    TAG,
    config_changes,
    decode_sshkeys,
    desired_config,
    encode_sshkeys,
    flag,
    property_string,
    split_tags,
)

__all__ = [
    "BOOT_DISK",
    "DEFAULT_USER",
    "DESTROY_PARAMS",
    "MARKER_PREFIX",
    "MAX_HOSTPCI",
    "MIN_MEMORY_MIB",
    "NEW_VMID",
    "RUN_ID",
    "TAG",
    "TASK_LOG_LIMIT",
    "UPID",
    "VMID_MAX",
    "VMID_MIN",
    "ApiCall",
    "DiskSize",
    "Gpu",
    "Method",
    "PlannedCall",
    "ProvisionOptions",
    "PublicKey",
    "Upid",
    "VmRef",
    "agent_interfaces_call",
    "boot_disk",
    "build_options",
    "clone_call",
    "config_changes",
    "config_get_call",
    "config_set_call",
    "decode_sshkeys",
    "desired_config",
    "destroy_call",
    "drive_options",
    "drive_size",
    "dry_run_calls",
    "encode_sshkeys",
    "exit_ok",
    "flag",
    "found_text",
    "human_size",
    "ipconfig0",
    "list_vms_call",
    "marked",
    "name_problem",
    "next_command",
    "nextid_call",
    "not_ours",
    "not_provisioned",
    "parse_disk",
    "parse_gpu",
    "parse_nextid",
    "parse_public_keys",
    "parse_size",
    "parse_upid",
    "pick_address",
    "property_string",
    "provisioned_marker",
    "redact",
    "removal_commands",
    "resize_call",
    "run_marker",
    "split_tags",
    "start_call",
    "stop_call",
    "task_log_call",
    "task_status_call",
    "vm_status_call",
    "vmid_taken",
]
