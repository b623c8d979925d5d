"""Ansible callback: one JSON line per task result, per loop item, for ctl to summarise.

Enabled by ctl only (ANSIBLE_CALLBACKS_ENABLED=modelfleet_events); writes to the file named
by MODELFLEET_EVENTS. The screen output still goes, whole, to the run's log file.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ansible.plugins.callback import CallbackBase  # type: ignore[import-untyped]

DOCUMENTATION = """
name: modelfleet_events
type: notification
short_description: JSON lines of task results for ctl
description: Writes one JSON object per task result and loop item to $MODELFLEET_EVENTS.
"""


class CallbackModule(CallbackBase):  # type: ignore[misc]
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "notification"
    CALLBACK_NAME = "modelfleet_events"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self) -> None:
        super().__init__()
        path = os.environ.get("MODELFLEET_EVENTS")
        self._out = Path(path).open("a", encoding="utf-8") if path else None  # noqa: SIM115

    def _emit(self, result: Any, status: str, item: Any = None) -> None:
        if self._out is None:
            return
        data = result._result
        label = None
        if item is not None:
            label = data.get("_ansible_item_label", item)
            if isinstance(label, dict):
                label = label.get("unit") or label.get("path")
        event = {
            "host": result._host.get_name(),
            "task": result._task.get_name(),
            "status": status,
            "item": label if isinstance(label, str | int | float | type(None)) else str(label),
            "changed": bool(data.get("changed", False)),
            # Room for a failed shard's cause and journal lines (start_shards.yml's report).
            "msg": str(data.get("msg", ""))[:8000] if status != "ok" else "",
        }
        self._out.write(json.dumps(event) + "\n")
        self._out.flush()

    def v2_runner_on_ok(self, result: Any) -> None:
        if "results" not in result._result:
            self._emit(result, "ok")

    def v2_runner_on_failed(self, result: Any, ignore_errors: bool = False) -> None:
        if "results" not in result._result:
            self._emit(result, "ignored" if ignore_errors else "failed")

    def v2_runner_on_unreachable(self, result: Any) -> None:
        self._emit(result, "unreachable")

    def v2_runner_item_on_ok(self, result: Any) -> None:
        self._emit(result, "ok", result._result.get("item"))

    def v2_runner_item_on_failed(self, result: Any) -> None:
        self._emit(result, "failed", result._result.get("item"))

    def v2_playbook_on_stats(self, stats: Any) -> None:
        del stats
        if self._out is not None:
            self._out.close()
            self._out = None
