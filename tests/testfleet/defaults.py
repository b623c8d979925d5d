"""The default fleet: seven kinds of node (docs/testfleet.md's table), then again."""

from __future__ import annotations

from typing import Final

from tests.testfleet.specs import FabricSpec, GpuProcessSpec, GpuSpec, HcaSpec, NodeSpec

H100: Final = "NVIDIA H100 80GB HBM3"
H100_MIB: Final = 81559
IB_HCAS: Final = ("mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3")


def _h100_node(
    fabric: str,
    down: tuple[str, ...] = (),
    processes: tuple[GpuProcessSpec, ...] = (),
    underline: bool = False,
) -> NodeSpec:
    return NodeSpec(
        memory_gib=2048,
        memory_available_gib=1990,
        labels={"role": "inference"},
        gpus=GpuSpec(
            model=H100,
            count=8,
            memory_mib=H100_MIB,
            nvlink="all",
            nvlink_width=18,
            processes=processes,
            underline_topo_header=underline,
        ),
        hcas=tuple(HcaSpec(hca, state="DOWN" if hca in down else "ACTIVE") for hca in IB_HCAS),
        fabrics=(FabricSpec(fabric, IB_HCAS, 400),),
    )


def default_spec(index: int) -> NodeSpec:
    """The spec of node-INDEX in the default fleet: seven kinds of node, then again."""
    kind = (index - 1) % 7
    if kind == 0:  # HGX H100, NVSwitch, four HCAs on ib-a
        return _h100_node("ib-a")
    if kind == 1:  # the same with one HCA down
        return _h100_node("ib-a", down=("mlx5_2",))
    if kind == 2:  # PCIe L40S, no ECC reported, no RDMA
        return NodeSpec(
            memory_gib=512,
            labels={"role": "inference"},
            gpus=GpuSpec(model="NVIDIA L40S", count=4, memory_mib=46068, ecc=False),
        )
    if kind == 3:  # A100 PCIe in NVLink-bridged pairs, GPU 3 with uncorrected ECC errors
        return NodeSpec(
            memory_gib=1024,
            labels={"role": "inference"},
            gpus=GpuSpec(
                model="NVIDIA A100 80GB PCIe",
                count=4,
                memory_mib=81920,
                nvlink=((0, 1), (2, 3)),
                nvlink_width=12,
                uncorrected_ecc={3: 2},
            ),
        )
    if kind == 4:
        return NodeSpec(memory_gib=8, labels={"role": "general"})
    if kind == 5:
        return NodeSpec(memory_gib=64, labels={"role": "coding"})
    # HGX H100 on ib-b with somebody else's process on GPU 5
    return _h100_node(
        "ib-b",
        processes=(GpuProcessSpec(gpu=5, pid=4121, name="python3", used_mib=20480),),
        underline=True,
    )
