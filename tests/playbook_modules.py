"""The Ansible modules of playbooks/library, loaded as Python modules for unit tests."""

from __future__ import annotations

import importlib.util
from types import ModuleType

from tests.ctl import ROOT

LIBRARY = ROOT / "playbooks" / "library"


def load_playbook_module(name: str) -> ModuleType:
    """A fresh copy of playbooks/library/NAME.py each call."""
    spec = importlib.util.spec_from_file_location(name, LIBRARY / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
