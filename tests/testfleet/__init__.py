"""testfleet: a local fleet of Debian nodes for trying and testing `ctl` without hardware.

Each node is a `systemd-nspawn` container with systemd as PID 1 and a real sshd, booted
from one cached debootstrap root filesystem through an overlay (one upper directory per
node). The containers share the host's network; node-N's sshd listens on 127.0.1.N:22 only.
Each node gets fake hardware from its spec: a fake `nvidia-smi` (tests/fakes/nvidia_smi.py),
a /proc/meminfo bind-mounted at boot, an InfiniBand sysfs tree and NVIDIA PCI devices.

    scripts/testfleet up N [--specs FILE]   boot node-1..node-N (idempotent), keys, inventory
    scripts/testfleet status                one line per node
    scripts/testfleet down                  power every node off
    scripts/testfleet stop NODE / start NODE
    scripts/testfleet cut NODE / heal NODE       drop its packets both ways / undo it
    scripts/testfleet freeze NODE / thaw NODE    freeze its processes / undo it
    scripts/testfleet specs N               the default specs of N nodes (a --specs template)
    scripts/testfleet check                 can this machine run the fleet?
    scripts/testfleet ssh NODE [COMMAND]    ssh to a node with the fleet's key and known_hosts
    scripts/testfleet clean [--all]         forget nodes, keys, inventory (--all: the rootfs)

Everything lives in ${MODELFLEET_TESTFLEET_DIR:-/var/tmp/modelfleet-testfleet}. Needs root,
systemd-nspawn (systemd-container) and debootstrap; works without systemd on the host.
See docs/testfleet.md.

The modules, each importing only those above it: specs (the node specs, pydantic, and the
spec file format), defaults (the default fleet), hardware (the fake GPUs, HCAs, memory and
nvidia-smi as files), nodefiles (all a node's files and their install), state (the state
directory, Node, Fleet, the lock), cgroups, nspawn (booting and stopping containers),
faults (cut, heal, freeze, thaw: a node that vanishes or hangs),
rootfs (the debootstrap image), access (keys, known_hosts, inventory), fleet (up, start,
stop, down, status, clean), cli (argparse). The names below are the API the tests and
benchmarks use: `from tests import testfleet`.
"""

from tests.testfleet.cgroups import node_cpu_seconds
from tests.testfleet.defaults import default_spec
from tests.testfleet.fleet import UpResult, clean, down, start, status, stop, up
from tests.testfleet.hardware import (
    NVIDIA_SMI_FAKE,
    NVIDIA_SMI_OUTPUTS,
    NodeFile,
    gpu_data,
    gpu_uuid,
)
from tests.testfleet.nodefiles import node_files
from tests.testfleet.nspawn import NodeState, check_host, node_state
from tests.testfleet.specs import (
    FabricSpec,
    FleetError,
    GpuProcessSpec,
    GpuSpec,
    HcaSpec,
    NodeSpec,
    SpecError,
    node_index,
    node_name,
    specs_from_file,
)
from tests.testfleet.state import Fleet, Node, load_fleet, state_dir

__all__ = [
    "NVIDIA_SMI_FAKE",
    "NVIDIA_SMI_OUTPUTS",
    "FabricSpec",
    "Fleet",
    "FleetError",
    "GpuProcessSpec",
    "GpuSpec",
    "HcaSpec",
    "Node",
    "NodeFile",
    "NodeSpec",
    "NodeState",
    "SpecError",
    "UpResult",
    "check_host",
    "clean",
    "default_spec",
    "down",
    "gpu_data",
    "gpu_uuid",
    "load_fleet",
    "node_cpu_seconds",
    "node_files",
    "node_index",
    "node_name",
    "node_state",
    "specs_from_file",
    "start",
    "state_dir",
    "status",
    "stop",
    "up",
]
