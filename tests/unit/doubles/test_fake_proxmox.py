"""The fake Proxmox answers as Proxmox does, down to the HTTP reason phrase.

Raw HTTPS requests (requests, not proxmoxer) check the wire: status, reason phrase,
envelope, the `errors` object, the UPID, locks, the agent's "not running" 500s. One test
goes through proxmoxer to show where the reason phrase ends up.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import requests
from proxmoxer import ProxmoxAPI, ResourceException  # type: ignore[import-untyped]

from tests.fakes.proxmox import Fault, Knobs, Running, running_fake

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIPC/9GoZa7DDp4N7+XqtKkpIlxUhP0baYbO0YN9ruu6c ops"


@pytest.fixture
def pve(tmp_path: Path) -> Iterator[Running]:
    yield from running_fake(tmp_path, Knobs(auth_failure_delay=0.0, clone_seconds=0.3))


class Client:
    def __init__(self, pve: Running, token: str | None = None) -> None:
        knobs = pve.knobs
        self.base = f"https://127.0.0.1:{pve.port}/api2/json"
        self.session = requests.Session()
        self.verify = str(pve.ca_file)  # per request: REQUESTS_CA_BUNDLE beats Session.verify
        value = token or f"{knobs.token_id}={knobs.token_secret}"
        self.session.headers["Authorization"] = f"PVEAPIToken={value}"

    def __call__(self, method: str, path: str, **params: str) -> requests.Response:
        if method in ("GET", "DELETE"):
            return self.session.request(
                method, self.base + path, params=params, verify=self.verify, timeout=10
            )
        return self.session.request(
            method, self.base + path, data=params, verify=self.verify, timeout=10
        )

    def data(self, method: str, path: str, **params: str) -> Any:
        response = self(method, path, **params)
        assert response.status_code == 200, (response.status_code, response.reason)
        return response.json()["data"]

    def wait(self, upid: str) -> dict[str, Any]:
        node = upid.split(":")[1]
        for _ in range(100):
            status: dict[str, Any] = self.data("GET", f"/nodes/{node}/tasks/{upid}/status")
            if status["status"] == "stopped":
                return status
            time.sleep(0.05)
        raise AssertionError("task did not stop")


@pytest.fixture
def api(pve: Running) -> Client:
    return Client(pve)


def test_data_comes_in_an_envelope_and_nextid_is_a_string(api: Client) -> None:
    response = api("GET", "/cluster/nextid")
    assert response.status_code == 200
    assert response.headers["Content-Type"] == "application/json;charset=UTF-8"
    assert response.json() == {"data": "100"}


def test_nextid_with_a_taken_vmid_is_a_parameter_error(api: Client) -> None:
    response = api("GET", "/cluster/nextid", vmid="9000")
    assert (response.status_code, response.reason) == (400, "Parameter verification failed.")
    assert response.json()["errors"] == {"vmid": "VM 9000 already exists"}


@pytest.mark.parametrize(
    ("params", "errors"),
    [
        (
            {"newid": "101", "full": "true"},
            {"full": "type check ('boolean') failed - got 'true'"},
        ),
        (
            {"newid": "101", "fast": "1"},
            {
                "fast": "property is not defined in schema and the schema does not allow "
                "additional properties"
            },
        ),
        # the format is checked before the minimum (check_prop's order)
        ({"newid": "42"}, {"newid": "invalid format - value does not look like a valid VM ID\n"}),
        ({"newid": "abc"}, {"newid": "type check ('integer') failed - got 'abc'"}),
        ({}, {"newid": "property is missing and it is not optional"}),
        (
            {"newid": "101", "name": "gpu_7"},
            {"name": "invalid format - value does not look like a valid DNS name\n"},
        ),
    ],
)
def test_bad_parameters_get_parameter_verification_failed(
    api: Client, params: dict[str, str], errors: dict[str, str]
) -> None:
    response = api("POST", "/nodes/pve/qemu/9000/clone", **params)
    assert (response.status_code, response.reason) == (400, "Parameter verification failed.")
    body = response.json()
    assert body["data"] is None
    assert body["errors"] == errors
    assert body["message"] == "Parameter verification failed.\n"


def test_a_clone_is_a_task_with_a_upid_and_locks_the_new_vm(pve: Running, api: Client) -> None:
    upid = api.data("POST", "/nodes/pve/qemu/9000/clone", newid="101", name="gpu-7", full="1")
    # PVE/UPID.pm: "UPID:%s:%08X:%08X:%08X:%s:%s:%s:"; the id is the *source* vmid.
    assert re.fullmatch(
        r"UPID:pve:[0-9A-F]{8}:[0-9A-F]{8}:[0-9A-F]{8}:qmclone:9000:automation@pve!ctl:", upid
    )
    running = api.data("GET", f"/nodes/pve/tasks/{upid}/status")
    assert running["status"] == "running" and "exitstatus" not in running
    assert api.data("GET", "/nodes/pve/qemu/101/config")["lock"] == "clone"
    locked = api("PUT", "/nodes/pve/qemu/101/config", cores="2")
    assert (locked.status_code, locked.reason) == (500, "VM is locked (clone)")
    again = api("POST", "/nodes/pve/qemu/9000/clone", newid="101")
    assert (again.status_code, again.reason) == (
        500,
        "unable to create VM 101: config file already exists",
    )
    done = api.wait(upid)
    assert done["exitstatus"] == "OK"
    config = api.data("GET", "/nodes/pve/qemu/101/config")
    assert "lock" not in config and config["name"] == "gpu-7"
    assert config["scsi0"] == "local-lvm:vm-101-disk-0,size=3584M"
    log = api.data("GET", f"/nodes/pve/tasks/{upid}/log")
    assert log[0]["n"] == 1 and log[-1]["t"] == "TASK OK"


def test_a_failed_clone_removes_its_own_config_and_logs_the_error(
    pve: Running, api: Client
) -> None:
    pve.knobs.fail_clone = "lvcreate 'pve/vm-101-disk-0' error: insufficient free space"
    upid = api.data("POST", "/nodes/pve/qemu/9000/clone", newid="101", full="1")
    status = api.wait(upid)
    assert status["exitstatus"] == (
        "clone failed: lvcreate 'pve/vm-101-disk-0' error: insufficient free space"
    )
    gone = api("GET", "/nodes/pve/qemu/101/config")
    assert (gone.status_code, gone.reason) == (
        500,
        "Configuration file 'nodes/pve/qemu-server/101.conf' does not exist",
    )
    log = [line["t"] for line in api.data("GET", f"/nodes/pve/tasks/{upid}/log")]
    assert log[-1].startswith("TASK ERROR: clone failed: lvcreate")


def clone(api: Client, newid: str) -> None:
    api.wait(api.data("POST", "/nodes/pve/qemu/9000/clone", newid=newid, full="1"))


def test_sshkeys_must_arrive_url_encoded(api: Client) -> None:
    clone(api, "101")
    raw = api("PUT", "/nodes/pve/qemu/101/config", sshkeys=KEY)
    assert (raw.status_code, raw.reason) == (400, "Parameter verification failed.")
    assert raw.json()["errors"]["sshkeys"].startswith(
        "invalid format - invalid urlencoded string: ssh-ed25519 AAAA"
    )
    assert api("PUT", "/nodes/pve/qemu/101/config", sshkeys=quote(KEY, safe="")).status_code == 200
    broken = api("PUT", "/nodes/pve/qemu/101/config", sshkeys=quote("ssh-ed25519 AAAA x", safe=""))
    assert (broken.status_code, broken.reason) == (500, "SSH public key validation error")


def test_ipconfig_and_hostpci_are_checked_as_property_strings(api: Client) -> None:
    clone(api, "101")
    response = api(
        "PUT", "/nodes/pve/qemu/101/config", ipconfig0="ip=10.0.0.5,gw=10.0.0.1", hostpci0="x=1"
    )
    assert response.status_code == 400
    assert response.json()["errors"] == {
        "ipconfig0": "invalid format - format error\nipconfig0.ip: invalid format - value does "
        "not look like a valid ipv4 network configuration\n\n",
        "hostpci0": "invalid format - invalid key in comma-separated list property: x\n",
    }
    gw_alone = api("PUT", "/nodes/pve/qemu/101/config", ipconfig0="gw=10.0.0.1")
    assert (
        "missing property - 'ipconfig0.gw' requires this property"
        in (gw_alone.json()["errors"]["ipconfig0"])
    )


def test_a_token_may_not_set_a_raw_pci_device(api: Client) -> None:
    clone(api, "101")
    raw = api("PUT", "/nodes/pve/qemu/101/config", hostpci0="0000:41:00.0,pcie=1")
    assert (raw.status_code, raw.reason) == (
        500,
        "only root can set 'hostpci0' config for non-mapped devices",
    )
    mapped = api("PUT", "/nodes/pve/qemu/101/config", hostpci0="mapping=h100,pcie=1")
    assert mapped.status_code == 200


def test_the_agent_answers_500_until_it_runs(pve: Running, api: Client) -> None:
    clone(api, "101")
    not_configured = api("GET", "/nodes/pve/qemu/101/agent/network-get-interfaces")
    assert (not_configured.status_code, not_configured.reason) == (
        500,
        "No QEMU guest agent configured",
    )
    api.data("PUT", "/nodes/pve/qemu/101/config", agent="1")
    stopped = api("GET", "/nodes/pve/qemu/101/agent/network-get-interfaces")
    assert stopped.reason == "VM 101 is not running"
    assert api.wait(api.data("POST", "/nodes/pve/qemu/101/status/start"))["exitstatus"] == "OK"
    booting = api("GET", "/nodes/pve/qemu/101/agent/network-get-interfaces")
    assert (booting.status_code, booting.reason) == (500, "QEMU guest agent is not running")
    time.sleep(pve.knobs.agent_delay)
    result = api.data("GET", "/nodes/pve/qemu/101/agent/network-get-interfaces")["result"]
    assert [i["name"] for i in result] == ["lo", "eth0"]
    eth0 = {a["ip-address"] for a in result[1]["ip-addresses"]}
    assert eth0 == {"192.0.2.10", "fe80::be24:11ff:fe12:3456"}


def test_a_running_vm_is_not_destroyed_and_a_locked_one_fails_in_the_task(
    api: Client,
) -> None:
    clone(api, "101")
    api.wait(api.data("POST", "/nodes/pve/qemu/101/status/start"))
    running = api("DELETE", "/nodes/pve/qemu/101", purge="1")
    assert (running.status_code, running.reason) == (500, "VM 101 is running - destroy failed")
    api.wait(api.data("POST", "/nodes/pve/qemu/101/status/stop"))
    upid = api.data("POST", "/nodes/pve/qemu/9000/clone", newid="102", full="1")
    locked = api.wait(api.data("DELETE", "/nodes/pve/qemu/102", purge="1"))
    assert locked["exitstatus"] == "VM is locked (clone)"
    api.wait(upid)
    assert api.wait(api.data("DELETE", "/nodes/pve/qemu/101", purge="1"))["exitstatus"] == "OK"


def test_a_bad_token_gets_401_with_pveproxys_reason(pve: Running) -> None:
    knobs = pve.knobs
    cases = {
        f"{knobs.token_id}=wrong": "invalid token value!",
        f"automation@pve!other={knobs.token_secret}": "no such token 'other' for user "
        "'automation@pve'",
        f"nobody@pve!ctl={knobs.token_secret}": "user 'nobody@pve' does not exist",
    }
    for token, reason in cases.items():
        response = Client(pve, token)("GET", "/cluster/resources")
        assert (response.status_code, response.reason, response.content) == (401, reason, b"")
    anonymous = requests.get(
        f"https://127.0.0.1:{pve.port}/api2/json/cluster/resources",
        verify=str(pve.ca_file),
        timeout=10,
    )
    assert (anonymous.status_code, anonymous.reason) == (401, "No ticket")


def test_resources_lack_name_and_status_until_the_rrd_has_them(pve: Running, api: Client) -> None:
    clone(api, "101")
    entries = {e["vmid"]: e for e in api.data("GET", "/cluster/resources", type="vm")}
    assert entries[9000]["name"] == "ubuntu-2404-cloud" and entries[9000]["template"] == 1
    assert entries[101] == {
        "id": "qemu/101",
        "vmid": 101,
        "node": "pve",
        "type": "qemu",
        "status": "unknown",
    }
    pve.knobs.rrd_interval = 0.0
    fresh = {e["vmid"]: e for e in api.data("GET", "/cluster/resources", type="vm")}[101]
    assert (fresh["name"], fresh["status"], fresh["template"]) == (
        "Copy-of-VM-ubuntu-2404-cloud",  # clone_vm's name when none is given
        "stopped",
        0,
    )


def test_resize_grows_and_never_shrinks(api: Client) -> None:
    clone(api, "101")
    assert (
        api.wait(api.data("PUT", "/nodes/pve/qemu/101/resize", disk="scsi0", size="+1G"))[
            "exitstatus"
        ]
        == "OK"
    )
    assert api.data("GET", "/nodes/pve/qemu/101/config")["scsi0"].endswith("size=4608M")
    shrink = api.wait(api.data("PUT", "/nodes/pve/qemu/101/resize", disk="scsi0", size="1G"))
    assert shrink["exitstatus"] == "shrinking disks is not supported"
    bad = api("PUT", "/nodes/pve/qemu/101/resize", disk="scsi0", size="1GB")
    assert bad.json()["errors"] == {"size": "value does not match the regex pattern"}


def test_proxmoxer_reads_the_reason_phrase(pve: Running) -> None:
    knobs = pve.knobs
    proxmox = ProxmoxAPI(
        "127.0.0.1",
        port=pve.port,
        user=knobs.token_id.split("!")[0],
        token_name=knobs.token_id.split("!")[1],
        token_value=knobs.token_secret,
        verify_ssl=str(pve.ca_file),
    )
    with pytest.raises(ResourceException) as raised:
        proxmox.nodes("pve").qemu(9000).clone.post(newid=101, full="yes")
    error = raised.value
    assert (error.status_code, error.content) == (400, "Parameter verification failed.")
    assert error.errors == {"full": "type check ('boolean') failed - got 'yes'"}
    assert proxmox.cluster.nextid.get() == "100"


# --- two nodes: clones with target, the rename race; pveproxy's relay errors ---------------


@pytest.fixture
def two(tmp_path: Path) -> Iterator[Running]:
    knobs = Knobs(
        auth_failure_delay=0.0,
        clone_seconds=0.3,
        nodes=("pve-a", "pve-b"),
        template_storage="ceph-vm",
        shared_storages=("ceph-vm",),
    )
    yield from running_fake(tmp_path, knobs)


def test_a_clone_with_target_runs_on_the_template_node_and_lands_on_the_target(
    two: Running,
) -> None:
    api = Client(two)
    upid = api.data(
        "POST", "/nodes/pve-a/qemu/9000/clone", newid="101", full="1", target="pve-b",
        description="modelfleet-run-3f9ac1d2e4b5",
    )  # fmt: skip
    assert upid.startswith("UPID:pve-a:") and ":qmclone:9000:" in upid
    # While it runs, its temporary config is on the template's node.
    assert api.data("GET", "/nodes/pve-a/qemu/101/config")["lock"] == "clone"
    assert api.wait(upid)["exitstatus"] == "OK"
    config = api.data("GET", "/nodes/pve-b/qemu/101/config")
    assert config["description"] == "modelfleet-run-3f9ac1d2e4b5"
    assert config["scsi0"] == "ceph-vm:vm-101-disk-0,size=3584M"
    gone = api("GET", "/nodes/pve-a/qemu/101/config")
    assert gone.reason == "Configuration file 'nodes/pve-a/qemu-server/101.conf' does not exist"
    (entry,) = [e for e in api.data("GET", "/cluster/resources", type="vm") if e["vmid"] == 101]
    assert entry["node"] == "pve-b"


def test_a_clone_with_target_needs_shared_storage_and_a_cluster_node(two: Running) -> None:
    api = Client(two)
    unknown = api("POST", "/nodes/pve-a/qemu/9000/clone", newid="101", full="1", target="pve-c")
    assert (unknown.status_code, unknown.reason) == (500, "no such cluster node 'pve-c'")
    local = api(
        "POST", "/nodes/pve-a/qemu/9000/clone", newid="101", full="1", target="pve-b",
        storage="local-lvm",
    )  # fmt: skip
    assert local.reason == "can't clone to non-shared storage 'local-lvm'"
    two.fake.add_vm(
        9001, "local-template",
        {"template": "1", "scsi0": "local-lvm:base-9001-disk-0,size=2G"}, node="pve-a",
    )  # fmt: skip
    refused = api("POST", "/nodes/pve-a/qemu/9001/clone", newid="101", full="1", target="pve-b")
    assert refused.reason == "can't clone VM to node 'pve-b' (VM uses local storage)"


def test_a_vmid_taken_on_another_node_fails_the_clone_worker_at_the_rename(two: Running) -> None:
    api = Client(two)
    two.fake.add_vm(101, "someone-else", node="pve-b")
    # The early check looks at pve-a's own file only: it passes, and the worker fails.
    upid = api.data("POST", "/nodes/pve-a/qemu/9000/clone", newid="101", full="1", target="pve-b")
    status = api.wait(upid)
    assert status["exitstatus"] == (
        "close (rename) atomic file '/etc/pve/nodes/pve-a/qemu-server/101.conf' failed: File exists"
    )
    log = [line["t"] for line in api.data("GET", f"/nodes/pve-a/tasks/{upid}/log")]
    assert log[-1] == (
        "TASK ERROR: close (rename) atomic file '/etc/pve/nodes/pve-a/qemu-server/101.conf' "
        "failed: File exists"
    )
    other = two.fake.vm(101)
    assert other is not None and other.node == "pve-b" and other.config["name"] == "someone-else"
    # On the clone's own node, the early check refuses before forking.
    two.fake.add_vm(102, "mine-too", node="pve-a")
    same = api("POST", "/nodes/pve-a/qemu/9000/clone", newid="102", full="1", target="pve-b")
    assert same.reason == "unable to create VM 102: config file already exists"


def test_the_race_hook_makes_the_vm_on_the_node_it_names(two: Running) -> None:
    api = Client(two)
    two.knobs.race_nextid = 1
    two.knobs.race_node = "pve-b"
    assert api.data("GET", "/cluster/nextid") == "100"
    made = two.fake.vm(100)
    assert made is not None and made.node == "pve-b"
    assert api.data("GET", "/cluster/nextid") == "101"


def test_a_relay_error_is_pveproxys_status_and_reason_without_a_body(pve: Running) -> None:
    api = Client(pve)
    pve.knobs.faults = [Fault("GET", r"/cluster/nextid", 595, "No route to host", times=2)]
    for _ in range(2):
        response = api("GET", "/cluster/nextid")
        assert (response.status_code, response.reason) == (595, "No route to host")
        assert response.content == b""
        assert response.headers["Connection"] == "close"
    assert api.data("GET", "/cluster/nextid") == "100"
    assert [c.status for c in pve.fake.calls_to("GET", "/cluster/nextid")] == [595, 595, 200]


def test_a_dropped_connection_is_no_answer_at_all(pve: Running) -> None:
    api = Client(pve)
    pve.knobs.faults = [Fault("GET", r"/cluster/resources", None)]
    with pytest.raises(requests.exceptions.ConnectionError):
        api("GET", "/cluster/resources", type="vm")
    assert api("GET", "/cluster/resources", type="vm").status_code == 200


def test_a_fault_after_the_call_loses_only_the_answer(pve: Running) -> None:
    api = Client(pve)
    pve.knobs.faults = [Fault("POST", r".*/clone", 596, "Broken pipe", after=True)]
    response = api("POST", "/nodes/pve/qemu/9000/clone", newid="101", full="1")
    assert (response.status_code, response.reason) == (596, "Broken pipe")
    (task,) = pve.fake.tasks.values()
    assert task.type == "qmclone"  # the clone runs all the same
    assert api.wait(task.upid)["exitstatus"] == "OK"


def test_proxmoxer_gives_the_relay_reason_as_the_content(pve: Running) -> None:
    pve.knobs.faults = [Fault("GET", r"/cluster/nextid", 596, "Broken pipe")]
    knobs = pve.knobs
    user, _, name = knobs.token_id.partition("!")
    proxmox = ProxmoxAPI(
        "127.0.0.1", port=pve.port, user=user, token_name=name, token_value=knobs.token_secret,
        verify_ssl=str(pve.ca_file), timeout=5,
    )  # fmt: skip
    with pytest.raises(ResourceException) as raised:
        proxmox("cluster/nextid").get()
    assert (raised.value.status_code, raised.value.content) == (596, "Broken pipe")
