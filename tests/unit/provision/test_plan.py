"""The pure part of `ctl provision-node`: options, parameters as Proxmox wants them, answers."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from urllib.parse import parse_qsl, unquote

import pytest
import requests

from cli.errors import InputError
from cli.provision import plan
from cli.provision.plan import (
    ProvisionOptions,
    boot_disk,
    build_options,
    config_changes,
    decode_sshkeys,
    desired_config,
    drive_size,
    encode_sshkeys,
    exit_ok,
    ipconfig0,
    parse_disk,
    parse_gpu,
    parse_nextid,
    parse_public_keys,
    parse_upid,
    pick_address,
    redact,
)

ROOT = Path(__file__).resolve().parents[3]
ED25519 = (
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIPC/9GoZa7DDp4N7+XqtKkpIlxUhP0baYbO0YN9ruu6c ops@example"
)
MISLABELED = "ssh-rsa " + ED25519.split()[1]  # an ed25519 body under another type


def options(**changes: object) -> ProvisionOptions:
    values: dict[str, object] = {
        "name": "gpu-7",
        "node": "pve",
        "template": "9000",
        "cores": 8,
        "memory_mib": 65536,
        "disk": "100G",
        "storage": None,
        "ip": "dhcp",
        "gateway": None,
        "key_files": [("keys.pub", ED25519 + "\n")],
        "user": "llm",
        "gpus": ["h100-a", "h100-b"],
    }
    values.update(changes)
    return build_options(**values)  # type: ignore[arg-type]


def problems(**changes: object) -> list[str]:
    with pytest.raises(InputError) as raised:
        options(**changes)
    return [str(p) for p in raised.value.problems]


# --- the options ----------------------------------------------------------------------------


def test_good_options_are_kept_as_given() -> None:
    opts = options()
    assert opts.name == "gpu-7"
    assert opts.template_vmid == 9000
    assert opts.disk == plan.DiskSize("100G", relative=False, bytes=100 * 1024**3)
    assert opts.ipconfig == "ip=dhcp"
    assert [gpu.hostpci() for gpu in opts.gpus] == [
        "mapping=h100-a,pcie=1",
        "mapping=h100-b,pcie=1",
    ]
    assert opts.ssh_keys[0].line == ED25519


@pytest.mark.parametrize(
    ("name", "ok"),
    [
        ("gpu-7", True),
        ("gpu-7.lab.example", True),
        ("a", True),
        ("-gpu", False),
        ("gpu-", False),
        ("gpu_7", False),
        ("gpu 7", False),
        ("x" * 64, False),
        ("", False),
    ],
)
def test_a_name_is_a_dns_name_as_proxmox_and_cloud_init_need(name: str, ok: bool) -> None:
    assert (plan.name_problem(name) is None) == ok


def test_every_problem_is_reported_at_once() -> None:
    found = problems(
        name="-bad",
        cores=0,
        memory_mib=8,
        disk="100",
        ip="10.0.0.5",
        user="Root",
        gpus=["ok-map", "ok-map", "x y"],
        template="42",
    )
    wheres = sorted(p.split(":")[0] for p in found)
    assert wheres == sorted(
        ["NAME", "--cores", "--memory", "--disk", "--ip", "--user", "--gpu", "--gpu", "--template"]
    )


def test_at_least_one_public_key_is_needed() -> None:
    assert any("--ssh-key" in p for p in problems(key_files=[]))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("100G", (False, 100 * 1024**3)),
        ("1.5T", (False, int(1.5 * 1024**4))),
        ("+20G", (True, 20 * 1024**3)),
        ("512M", (False, 512 * 1024**2)),
    ],
)
def test_disk_sizes_are_proxmox_sizes_with_a_unit(text: str, expected: tuple[bool, int]) -> None:
    size = parse_disk(text)
    assert (size.relative, size.bytes) == expected


@pytest.mark.parametrize("text", ["100", "100GB", "-5G", "0G", "G", "ten"])
def test_a_size_without_unit_or_sense_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="size"):
        parse_disk(text)


@pytest.mark.parametrize(
    ("ip", "gateway", "value"),
    [
        ("dhcp", None, "ip=dhcp"),
        ("10.0.0.5/24", "10.0.0.1", "ip=10.0.0.5/24,gw=10.0.0.1"),
        ("10.0.0.5/24", None, "ip=10.0.0.5/24"),
        ("192.168.7.9/31", "192.168.7.8", "ip=192.168.7.9/31,gw=192.168.7.8"),
    ],
)
def test_ipconfig0_is_dhcp_or_a_cidr_and_gateway(ip: str, gateway: str | None, value: str) -> None:
    assert ipconfig0(ip, gateway) == value


@pytest.mark.parametrize(
    ("ip", "gateway", "why"),
    [
        ("dhcp", "10.0.0.1", "static"),
        ("DHCP", None, "neither dhcp"),
        ("10.0.0.5", "10.0.0.1", "neither dhcp nor a CIDR"),
        ("10.0.0.5/7", None, "prefix of 8 to 32"),
        ("10.0.0.0/24", None, "network's own address"),
        ("10.0.0.255/24", None, "network's own address"),
        ("fd00::5/64", None, "IPv6"),
        ("10.0.0.5/24", "10.0.1.1", "outside 10.0.0.0/24"),
        ("10.0.0.5/24", "10.0.0.5", "own address"),
        ("10.0.0.5/24", "gw", "not an IP address"),
    ],
)
def test_a_wrong_network_is_refused_with_why(ip: str, gateway: str | None, why: str) -> None:
    with pytest.raises(ValueError, match=re.escape(why)):
        ipconfig0(ip, gateway)


def test_gpus_are_mappings_or_raw_pci_ids() -> None:
    assert parse_gpu("h100_sxm-0").mapping == "h100_sxm-0"
    assert parse_gpu("0000:41:00.0").host == "0000:41:00.0"
    assert parse_gpu("41:00.0").hostpci() == "host=41:00.0,pcie=1"
    for wrong in ("1gpu", "a", "gpu/0", "0000:41:00.0;x"):
        with pytest.raises(ValueError):
            parse_gpu(wrong)


def test_more_gpus_than_a_vm_has_slots_are_refused() -> None:
    assert any("16 at most" in p for p in problems(gpus=[f"gpu{i}" for i in range(17)]))


def test_public_keys_are_checked_line_by_line() -> None:
    text = f"# ops keys\n\n{ED25519}\nssh-ed25519 not-base64!\nhello\n{MISLABELED} x\n"
    keys, found = parse_public_keys("keys.pub", text)
    assert [k.source for k in keys] == ["keys.pub:3"]
    assert [(p.line, p.message) for p in found] == [
        (4, "the key's body is not base64"),
        (5, "not an OpenSSH public key (expected 'ssh-ed25519 AAAA… comment')"),
        (6, "the key's body does not hold a ssh-rsa key"),
    ]


def test_a_private_key_is_named_as_such() -> None:
    _, found = parse_public_keys("id_ed25519", "-----BEGIN OPENSSH PRIVATE KEY-----\nb3Bl\n")
    assert [p.message for p in found] == ["this is a private key: pass the public one (.pub)"]


def test_an_empty_key_file_is_a_problem() -> None:
    _, found = parse_public_keys("empty.pub", "# nothing\n")
    assert [p.message for p in found] == ["holds no public key"]


# --- the parameters -------------------------------------------------------------------------

# pve-common PVE/JSONSchema.pm pve_verify_urlencoded
URLENCODED = re.compile(r"^[-%a-zA-Z0-9_.!~*'()]*$")


def test_sshkeys_is_url_encoded_once_here_and_once_by_the_form_encoding() -> None:
    keys = [ED25519, "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHk+/x= second key"]
    value = encode_sshkeys(keys)
    assert URLENCODED.match(value), "Proxmox checks the decoded form value is still URL-encoded"
    assert "%20" in value and "%0A" in value and "%2B" in value and "%2F" in value
    # What the HTTP client puts on the wire: the value form-encoded again.
    body = requests.Request("PUT", "https://pve/", data={"sshkeys": value}).prepare().body
    assert isinstance(body, str)
    assert "%2520" in body and "%250A" in body
    # Proxmox: the form decoding, then uri_unescape, then one key a line.
    received = dict(parse_qsl(body))["sshkeys"]
    assert received == value
    assert unquote(received).split("\n") == keys
    assert decode_sshkeys(value) == keys


def test_the_config_holds_everything_asked_with_booleans_as_0_or_1() -> None:
    config = desired_config(options(ip="10.0.0.5/24", gateway="10.0.0.1"))
    assert config == {
        "cores": "8",
        "memory": "65536",
        "ciuser": "llm",
        "sshkeys": encode_sshkeys([ED25519]),
        "ipconfig0": "ip=10.0.0.5/24,gw=10.0.0.1",
        "agent": "1",
        "tags": "modelfleet",
        "machine": "q35",
        "hostpci0": "mapping=h100-a,pcie=1",
        "hostpci1": "mapping=h100-b,pcie=1",
    }
    assert "machine" not in desired_config(options(gpus=[]))


def test_a_vm_configured_already_needs_nothing() -> None:
    wanted = desired_config(options())
    current = {
        **wanted,
        "cores": 8,  # JSON numbers compare as their text
        "memory": "current=65536",
        "agent": "enabled=1,fstrim_cloned_disks=1",
        "machine": "pc-q35-8.1",
        "hostpci0": "mapping=h100-a,pcie=on",
        "ipconfig0": "ip=dhcp",
        "tags": "prod;modelfleet",
        "sshkeys": encode_sshkeys([ED25519]),
        "name": "gpu-7",
    }
    assert config_changes(current, wanted) == {}


def test_changes_are_only_the_differences_tags_added_extra_gpus_deleted() -> None:
    wanted = desired_config(options(gpus=["h100-a"]))
    current = {
        **wanted,
        "cores": "2",
        "tags": "prod",
        "hostpci1": "mapping=old,pcie=1",
        "hostpci10": "mapping=older,pcie=1",
        "agent": "0",
    }
    del current["sshkeys"]
    assert config_changes(current, wanted) == {
        "cores": "8",
        "tags": "prod;modelfleet",
        "agent": "1",
        "sshkeys": wanted["sshkeys"],
        "delete": "hostpci1,hostpci10",
    }


def test_the_clone_is_full_named_and_targets_the_node_when_the_template_is_elsewhere() -> None:
    opts = options(storage="local-zfs")
    here = plan.clone_call(opts, "pve", 9000, 101, "modelfleet-run-3f9ac1d2e4b5")
    assert here.path == "/nodes/pve/qemu/9000/clone"
    assert here.param_dict() == {
        "newid": "101",
        "name": "gpu-7",
        "full": "1",
        "description": "modelfleet-run-3f9ac1d2e4b5",
        "storage": "local-zfs",
    }
    there = plan.clone_call(opts, "pve2", 9000, 101, "modelfleet-run-3f9ac1d2e4b5")
    assert there.path == "/nodes/pve2/qemu/9000/clone"
    assert there.param_dict()["target"] == "pve"


def test_destroy_purges_and_removes_unreferenced_disks() -> None:
    call = plan.destroy_call("pve", 101)
    assert (call.method, call.path) == ("DELETE", "/nodes/pve/qemu/101")
    assert call.param_dict() == {"purge": "1", "destroy-unreferenced-disks": "1"}


def test_the_dry_run_lists_the_calls_in_the_order_they_are_made() -> None:
    calls = [p.call for p in plan.dry_run_calls(options(template="ubuntu"))]
    assert [(c.method, c.path.split("/")[-1]) for c in calls] == [
        ("GET", "resources"),
        ("GET", "nextid"),
        ("POST", "clone"),
        ("GET", "status"),
        ("GET", "config"),
        ("PUT", "config"),
        ("PUT", "resize"),
        ("GET", "status"),
        ("POST", "start"),
        ("GET", "status"),
        ("GET", "network-get-interfaces"),
    ]
    assert calls[2].path == "/nodes/pve/qemu/<vmid of ubuntu>/clone"
    assert calls[2].param_dict()["description"] == "modelfleet-run-<run id>"
    assert calls[5].param_dict() == desired_config(options())


# --- the run's marker, and whose a vmid is --------------------------------------------------


def test_the_marker_is_a_description_line_of_its_own() -> None:
    marker = plan.run_marker("3f9ac1d2e4b5")
    assert marker == "modelfleet-run-3f9ac1d2e4b5"
    # Proxmox gives the description back line by line, trailing blanks stripped.
    assert plan.marked({"description": "modelfleet-run-3f9ac1d2e4b5"}, marker)
    assert plan.marked({"description": "notes\n  modelfleet-run-3f9ac1d2e4b5 \nmore"}, marker)
    assert not plan.marked({"description": "modelfleet-run-3f9ac1d2e4b5x"}, marker)
    assert not plan.marked({"description": "see modelfleet-run-3f9ac1d2e4b5"}, marker)
    assert not plan.marked({"description": "modelfleet-run-0000aaaa1111"}, marker)
    assert not plan.marked({"name": "gpu-7", "tags": "modelfleet"}, marker)
    assert not plan.marked({"description": 7}, marker)


def test_what_a_foreign_vm_holds_is_said_briefly() -> None:
    assert plan.found_text({"name": "web-3", "description": "prod db\nsecond line"}) == (
        "named web-3, description 'prod db'"
    )
    assert plan.found_text({"lock": "create", "tags": "a;b"}) == (
        "without a name, no description, locked (create), tags a;b"
    )
    long = "x" * 80
    assert plan.found_text({"name": "n", "description": long}) == (
        f"named n, description '{'x' * 57}...'"
    )


@pytest.mark.parametrize(
    ("text", "taken"),
    [
        ("unable to create VM 101: config file already exists", True),
        ("clone failed: unable to create VM 101: config file already exists", True),
        (
            "close (rename) atomic file '/etc/pve/nodes/pve-a/qemu-server/101.conf' failed: "
            "File exists",
            True,
        ),
        ("VM 101 already exists", True),
        ("VM 101 already exists on node 'pve-b'", True),
        # another vmid, or another file, or another reason: not "taken"
        ("unable to create VM 1010: config file already exists", False),
        ("VM 1010 already exists", False),
        (
            "close (rename) atomic file '/etc/pve/nodes/pve-a/qemu-server/1010.conf' failed: "
            "File exists",
            False,
        ),
        (
            "close (rename) atomic file '/etc/pve/nodes/pve-a/qemu-server/101.conf' failed: "
            "Permission denied",
            False,
        ),
        ("close (rename) atomic file '/etc/pve/firewall/101.fw' failed: File exists", False),
        ("clone failed: lvcreate 'pve/vm-101-disk-0' error: insufficient free space", False),
    ],
)
def test_every_way_proxmox_says_a_vmid_is_taken(text: str, taken: bool) -> None:
    assert plan.vmid_taken(text, 101) is taken


# --- the answers ----------------------------------------------------------------------------


def test_a_upid_is_read_as_pve_common_writes_it() -> None:
    upid = "UPID:pve:0002A3F1:01B6D7E4:6627B3A0:qmclone:9000:automation@pve!ctl:"
    parsed = parse_upid(upid)
    assert parsed == plan.Upid(
        node="pve",
        pid=0x2A3F1,
        pstart=0x1B6D7E4,
        starttime=0x6627B3A0,
        type="qmclone",
        id="9000",
        user="automation@pve!ctl",
    )
    assert parse_upid("UPID:pve:2A3F1:01B6D7E4:6627B3A0:qmclone:9000:root@pam:") is None
    assert parse_upid("not a upid") is None


@pytest.mark.parametrize(
    ("exitstatus", "ok"),
    [
        ("OK", True),
        ("WARNINGS: 2", True),
        ("clone failed: out of space", False),
        ("unexpected status", False),
        ("", False),
    ],
)
def test_ok_and_warnings_are_success_anything_else_an_error(exitstatus: str, ok: bool) -> None:
    assert exit_ok(exitstatus) is ok


def test_nextid_answers_a_string_that_must_be_a_vmid() -> None:
    assert parse_nextid("101") == 101
    assert parse_nextid(101) == 101
    for wrong in ("99", "abc", None, "1000000000"):
        with pytest.raises(ValueError):
            parse_nextid(wrong)


def test_drive_sizes_and_the_boot_disk_come_from_the_config() -> None:
    config = {
        "boot": "order=ide2;scsi1;net0",
        "ide2": "local-lvm:vm-101-cloudinit,media=cdrom",
        "scsi0": "local-lvm:vm-101-disk-0,size=32G",
        "scsi1": "local-lvm:vm-101-disk-1,iothread=1,size=3584M",
    }
    assert boot_disk(config) == "scsi1"
    assert drive_size(config["scsi1"]) == 3584 * 1024**2
    assert boot_disk({"bootdisk": "virtio0", "virtio0": "x:vm-1-disk-0,size=1G"}) == "virtio0"
    assert boot_disk({"ide0": "none,media=cdrom", "sata0": "x:vm-1-disk-0,size=1G"}) == "sata0"
    assert boot_disk({"ide2": "local:iso/u.iso,media=cdrom"}) is None
    assert drive_size("x:vm-1-disk-0") is None


def test_the_address_is_the_first_global_unicast_ipv4_else_ipv6() -> None:
    def iface(name: str, *addresses: str) -> dict[str, object]:
        return {
            "name": name,
            "ip-addresses": [
                {"ip-address-type": "ipv6" if ":" in a else "ipv4", "ip-address": a}
                for a in addresses
            ],
        }

    interfaces = [
        iface("lo", "127.0.0.1", "::1"),
        iface("eth0", "fe80::1%eth0", "169.254.3.4", "2001:db8::10", "10.1.2.3"),
        iface("eth1", "192.0.2.77"),
    ]
    assert pick_address({"result": interfaces}) == "10.1.2.3"
    only_v6 = [interfaces[0], iface("eth0", "fe80::1", "2001:db8::10")]
    assert pick_address(only_v6) == "2001:db8::10"
    assert pick_address([iface("eth0", "fe80::1", "169.254.1.1", "224.0.0.1")]) is None
    assert pick_address({"result": "garbage"}) is None
    assert pick_address([{"name": "eth0"}, "x", iface("e", "not-an-ip")]) is None


def test_secrets_are_redacted_in_every_encoding() -> None:
    secret = "5f0c7a52+6b1e/4d2a"
    text = f"a {secret} b 5f0c7a52%2B6b1e%2F4d2a c 5f0c7a52%252B6b1e%252F4d2a"
    assert redact(text, [secret]) == "a *** b *** c ***"
    assert redact("nothing", ["", secret]) == "nothing"


def test_the_next_command_and_the_removal_commands() -> None:
    assert plan.next_command("gpu-7", "10.1.2.3") == "ctl onboard-node gpu-7 --host 10.1.2.3"
    commands = plan.removal_commands("pve", 101)
    assert "qm destroy 101 --purge" in commands[0]
    assert "pvesh delete /nodes/pve/qemu/101 --purge 1" in commands[1]


PLAN_MODULES = sorted(
    str(path.relative_to(ROOT / "cli"))
    for path in (ROOT / "cli" / "provision" / "plan").glob("*.py")
)


@pytest.mark.parametrize("module", [*PLAN_MODULES, "provision/api.py", "ops/provision.py"])
def test_only_the_edge_imports_proxmoxer_or_requests(module: str) -> None:
    tree = ast.parse((ROOT / "cli" / module).read_text(encoding="utf-8"))
    roots: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    assert roots & {"proxmoxer", "requests", "rich", "typer", "socket", "urllib3"} == set()


@pytest.mark.parametrize("module", PLAN_MODULES)
def test_the_plan_does_no_io(module: str) -> None:
    source = (ROOT / "cli" / module).read_text(encoding="utf-8")
    for call in ("open(", ".read_text(", ".write_text(", "subprocess", "environ"):
        assert call not in source
