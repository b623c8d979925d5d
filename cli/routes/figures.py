"""ctl's own figures, in the Prometheus text format the node exporter's textfile collector
reads (docs/metrics.md). Pure.

A pass's figures (`PassFigures`: replicas by state after it, replicas it could not place,
the autoscaler's decisions) are folded into the controller's running totals (`Totals`,
counters from its start), and both are written as one exposition: HELP and TYPE for every
metric, names prefixed `modelfleet_`, no timestamps (the collector refuses them).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Final

from cli.reconcile.planner import Plan
from cli.routes.table import RouteTable, State
from cli.routes.targets import TargetGroup

# Every metric ctl writes: name → (type, help). The dashboard and its test read this list.
METRICS: Final[Mapping[str, tuple[str, str]]] = {
    "modelfleet_passes_total": ("counter", "Reconcile passes since the controller started."),
    "modelfleet_pass_duration_seconds": ("gauge", "How long the last pass took."),
    "modelfleet_pass_exit_code": (
        "gauge",
        "The last pass's exit code: 0 the fleet matches the catalog, 1 something could not"
        " be done, 2 bad input.",
    ),
    "modelfleet_pass_end_timestamp_seconds": ("gauge", "When the last pass ended, Unix time."),
    "modelfleet_replicas": (
        "gauge",
        "Replicas after the last pass, by model and state (ready, starting, failed, unreachable).",
    ),
    "modelfleet_replicas_refused": (
        "gauge",
        "Replicas of a model the last pass could not place.",
    ),
    "modelfleet_refusals_total": (
        "counter",
        "Replicas that could not be placed, summed over the passes since the controller started.",
    ),
    "modelfleet_autoscale_desired_replicas": (
        "gauge",
        "The replicas the autoscaler wants for a model at the last pass.",
    ),
    "modelfleet_scaling_decisions_total": (
        "counter",
        "Autoscaler decisions to add (up) or remove (down) a replica, since the controller"
        " started.",
    ),
}
REPLICA_STATES: Final = (State.READY, State.STARTING, State.FAILED, State.UNREACHABLE)


@dataclass(frozen=True)
class PassFigures:
    """What one pass saw and decided, per model."""

    replicas: Mapping[tuple[str, str], int]  # (model, state) → how many; every state listed
    refused: Mapping[str, int]  # model → replicas not placed
    desired: Mapping[str, int]  # autoscaled model → replicas wanted
    scaled: Mapping[tuple[str, str], int]  # (model, "up" | "down") → decisions this pass


@dataclass(frozen=True)
class PassView:
    """What a pass leaves for Prometheus: the targets as the pass leaves the fleet, and its
    figures."""

    targets: tuple[TargetGroup, ...]
    figures: PassFigures


@dataclass(frozen=True)
class Totals:
    """The counters, from the controller's start."""

    passes: int = 0
    refusals: Mapping[str, int] = field(default_factory=dict)
    scaled: Mapping[tuple[str, str], int] = field(default_factory=dict)

    def add(self, figures: PassFigures | None) -> Totals:
        """One more pass; `figures` None: a pass that planned nothing (bad input)."""
        if figures is None:
            return Totals(self.passes + 1, self.refusals, self.scaled)
        refusals = Counter(self.refusals)
        refusals.update(figures.refused)
        scaled = Counter(self.scaled)
        scaled.update(figures.scaled)
        return Totals(self.passes + 1, dict(refusals), dict(scaled))


def pass_figures(table: RouteTable, plan: Plan) -> PassFigures:
    """The figures of a pass: `table` as the pass leaves the fleet (its stopped replicas
    withdrawn, its started ones in), `plan` what it decided."""
    replicas: Counter[tuple[str, str]] = Counter()
    for route in table.models:
        for state in REPLICA_STATES:
            replicas[(route.model, state.value)] += 0  # a model with none says 0, not nothing
        for replica in route.replicas:
            if replica.state is not State.WITHDRAWN:
                replicas[(route.model, replica.state.value)] += 1
    for replica in table.unrouted:
        if replica.state is not State.WITHDRAWN:
            replicas[(replica.model, replica.state.value)] += 1
    refused = Counter({route.model: 0 for route in table.models})
    refused.update(unplaced.model for unplaced in plan.unplaced)
    scaled: Counter[tuple[str, str]] = Counter()
    for decision in plan.scaling:
        if decision.change:
            scaled[(decision.model, "up" if decision.change > 0 else "down")] += 1
    desired = {decision.model: decision.desired for decision in plan.scaling}
    return PassFigures(dict(replicas), dict(refused), desired, dict(scaled))


def textfile(
    seconds: float,
    exit_code: int,
    ended: datetime,
    figures: PassFigures | None,
    totals: Totals,
) -> str:
    """The exposition: every metric of METRICS with its HELP and TYPE, each sample that
    this pass (or the totals) has. A pass that planned nothing has no per-model gauges."""
    samples: dict[str, list[tuple[dict[str, str], float]]] = {name: [] for name in METRICS}
    samples["modelfleet_passes_total"].append(({}, totals.passes))
    samples["modelfleet_pass_duration_seconds"].append(({}, seconds))
    samples["modelfleet_pass_exit_code"].append(({}, exit_code))
    samples["modelfleet_pass_end_timestamp_seconds"].append(({}, ended.timestamp()))
    if figures is not None:
        for (model, state), count in sorted(figures.replicas.items()):
            samples["modelfleet_replicas"].append(({"model": model, "state": state}, count))
        for model, count in sorted(figures.refused.items()):
            samples["modelfleet_replicas_refused"].append(({"model": model}, count))
        for model, count in sorted(figures.desired.items()):
            samples["modelfleet_autoscale_desired_replicas"].append(({"model": model}, count))
    for model, count in sorted(totals.refusals.items()):
        samples["modelfleet_refusals_total"].append(({"model": model}, count))
    for (model, direction), count in sorted(totals.scaled.items()):
        labels = {"model": model, "direction": direction}
        samples["modelfleet_scaling_decisions_total"].append((labels, count))
    lines = []
    for name, (kind, text) in METRICS.items():
        lines.append(f"# HELP {name} {_escape_help(text)}")
        lines.append(f"# TYPE {name} {kind}")
        lines += [f"{name}{_labels(labels)} {_value(value)}" for labels, value in samples[name]]
    return "\n".join(lines) + "\n"


def _labels(labels: Mapping[str, str]) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{_escape_value(v)}"' for k, v in labels.items()) + "}"


def _escape_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _value(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))
