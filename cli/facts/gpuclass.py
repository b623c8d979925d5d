"""GPU model name (as nvidia-smi prints it) → the GPU class a catalog profile asks for.

Order of resolution, first hit wins:

1. the node's `gpu_classes` overrides: an exact name, else the first fnmatch glob that
   matches, in the order written;
2. `BUILTIN_CLASSES`, a table of regular expressions tried top to bottom;
3. the name itself, without a leading "NVIDIA " or "Tesla " and with spaces removed, so an
   unknown GPU is never silently taken for a known class.

The table is ordered so that a longer model name is tried before any model name it contains:
GB200 before B200, GH200 before H200, L40S before L40 before L4, A100 before A10. Patterns use
word boundaries, so "H200" does not match inside "GH200" either way. AMD Instinct (MI-series)
names are not in the table: they fall through to rule 3.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping
from typing import Final

__all__ = ["BUILTIN_CLASSES", "gpu_class"]

# (regular expression searched in the full name, class). A class may use \1-style groups.
BUILTIN_CLASSES: Final[tuple[tuple[str, str], ...]] = (
    # Blackwell and Grace superchips first: their names contain B200 / H200 / H100.
    (r"\bGB200\b", "GB200"),
    (r"\bGH200\b", "GH200"),
    (r"\bB200\b", "B200"),
    # Hopper. "NVIDIA H100 80GB HBM3" (SXM), "NVIDIA H100 PCIe", "NVIDIA H100 NVL" are all H100.
    (r"\bH200\b", "H200"),
    (r"\bH800\b", "H800"),
    (r"\bH100\b", "H100"),
    (r"\bH20\b", "H20"),
    # Ampere data centre. "NVIDIA A100-SXM4-80GB" and "NVIDIA A100 80GB PCIe" are both A100.
    (r"\bA800\b", "A800"),
    (r"\bA100\b", "A100"),
    (r"\bA10G\b", "A10G"),
    (r"\bA10\b", "A10"),
    (r"\bA30\b", "A30"),
    (r"\bA40\b", "A40"),
    # Ada data centre: L40S before L40 before L4.
    (r"\bL40S\b", "L40S"),
    (r"\bL40\b", "L40"),
    (r"\bL4\b", "L4"),
    # Volta, Turing, Pascal.
    (r"\bV100S\b", "V100S"),
    (r"\bV100\b", "V100"),
    (r"\bT4\b", "T4"),
    (r"\bP100\b", "P100"),
    (r"\bP40\b", "P40"),
    # Workstation: "NVIDIA RTX 6000 Ada Generation" → RTX6000Ada, "NVIDIA RTX A6000" → A6000.
    (r"\bRTX 6000 Ada Generation$", "RTX6000Ada"),
    (r"\bRTX A(\d{4})$", r"A\1"),
    # GeForce: "NVIDIA GeForce RTX 4090" → RTX4090, "... RTX 4070 Ti SUPER" → RTX4070TiSUPER.
    # Anchored at the end so laptop parts ("... RTX 4090 Laptop GPU") are not read as desktop.
    (r"\bGeForce RTX (\d{4}(?: Ti)?(?: SUPER)?)$", r"RTX\1"),
)

_COMPILED: Final[tuple[tuple[re.Pattern[str], str], ...]] = tuple(
    (re.compile(pattern), template) for pattern, template in BUILTIN_CLASSES
)
_VENDOR_PREFIXES: Final = ("NVIDIA ", "Tesla ")


def gpu_class(name: str, overrides: Mapping[str, str] | None = None) -> str:
    """The GPU class for a GPU model name; see the module docstring for the rules."""
    name = name.strip()
    if not name:
        raise ValueError("a GPU with an empty model name has no class")
    if overrides:
        exact = overrides.get(name)
        if exact is not None:
            return _checked(name, exact)
        for glob, klass in overrides.items():
            if fnmatch.fnmatchcase(name, glob):
                return _checked(glob, klass)
    for regex, template in _COMPILED:
        match = regex.search(name)
        if match is not None:
            return match.expand(template).replace(" ", "")
    for prefix in _VENDOR_PREFIXES:
        if name.startswith(prefix):
            name = name[len(prefix) :]
            break
    return name.replace(" ", "")


def _checked(key: str, klass: str) -> str:
    klass = klass.strip()
    if not klass:
        raise ValueError(f"gpu_classes[{key!r}] is empty")
    return klass
