"""The controller: `ctl reconcile --watch`, a pass every interval for months (docs/controller.md).

What a long life brings is handled here, around the pass (which is the command's, and
knows nothing of this loop):

- a signal (SIGTERM from systemd, SIGINT from a terminal) asks it to stop: the step under
  way finishes, the steps not begun are said as left undone, and the loop ends with exit
  0; a second signal aborts at once (`Aborted`);
- a pass that fails (a catalog or inventory edited into something that does not load, a
  node's SSH or Ansible failing, the state directory gone read-only) is said, and the next
  pass, an interval later, reads the files again;
- every pass leaves `last-pass.json` in the state directory: when it ran, how long it took,
  what it did and what it could not, so that anyone can tell the controller is alive.

Signals are the process's, so the request to stop is one object (`STOP`) that the pass's
apply step asks between its steps.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any

from cli.edges.files import atomic_write
from cli.edges.ssh import SessionPool
from cli.ops.fleet import Fleet
from cli.reconcile.apply import Outcome
from cli.reconcile.planner import Plan
from cli.routes.figures import PassView

LAST_PASS = "last-pass.json"
# Descriptors left beside the kept sessions: the gather's new logins, playbook runs, files.
SPARE_DESCRIPTORS = 512
LAST_PASS_FORMAT = "modelfleet.last-pass/v1"
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Aborted(KeyboardInterrupt):
    """A second signal: stop now. A KeyboardInterrupt, so that a start under way is undone
    whole (cli/reconcile/apply.py) on the way out."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class StopRequest:
    """Whether ctl has been asked to stop, and by which signal."""

    def __init__(self) -> None:
        self.signal: str | None = None
        self._event = threading.Event()

    def requested(self) -> bool:
        return self.signal is not None

    def request(self, name: str) -> None:
        self.signal = name
        self._event.set()

    def wait(self, seconds: float) -> bool:
        """Sleep `seconds` (inf: for good) unless a stop is asked for first; whether one was."""
        return self._event.wait(None if seconds == float("inf") else max(0.0, seconds))

    def handle(self, signum: int, _frame: FrameType | None) -> None:
        if self.requested():
            raise Aborted(signum)
        self.request(signal.Signals(signum).name)

    def install(self) -> None:
        """Take SIGTERM and SIGINT (main thread only, as Python delivers them there)."""
        self.signal = None
        self._event.clear()
        for signum in STOP_SIGNALS:
            signal.signal(signum, self.handle)


STOP = StopRequest()


@dataclass
class PassRecord:
    """One pass, as last-pass.json says it (docs/controller.md)."""

    number: int
    started: datetime
    dry_run: bool
    seconds: float | None = None
    exit_code: int | None = None
    did: list[str] = field(default_factory=list)  # what changed (dry run: would change)
    could_not: list[str] = field(default_factory=list)  # what failed or waits, and why
    left_undone: list[str] = field(default_factory=list)  # not begun: ctl was stopping
    error: str | None = None  # why the pass did not run (bad input, a failure of ctl's own)
    # The targets and figures as the pass left the fleet, for Prometheus (cli/ops/metrics.py);
    # None: the pass did not plan.
    view: PassView | None = field(default=None, repr=False)

    def document(self) -> dict[str, Any]:
        return {
            "format": LAST_PASS_FORMAT,
            "pass": self.number,
            "started": self.started.isoformat(),
            "seconds": None if self.seconds is None else round(self.seconds, 3),
            "dry_run": self.dry_run,
            "exit_code": self.exit_code,
            "did": self.did,
            "could_not": self.could_not,
            "left_undone": self.left_undone,
            "error": self.error,
            "pid": os.getpid(),
        }


def note_plan(record: PassRecord, the_plan: Plan, fleet: Fleet) -> None:
    """What the pass found it could not do, and (a dry run) what it would do."""
    record.could_not += [f"{node}: not reached: {why}" for node, why in fleet.unreached.items()]
    record.could_not += [f"{u.model}: not placed" for u in the_plan.unplaced]
    record.could_not += [f"{w.model}: waits out its backoff" for w in the_plan.waits]
    record.could_not += foreign_gpu_processes(fleet)
    if record.dry_run:
        record.did += [f"would stop {s.replica}: {s.reason}" for s in the_plan.stops]
        record.did += [f"would start {s.replica}: {s.reason}" for s in the_plan.starts]
        record.did += [f"would drain {s.replica}: {s.reason}" for s in the_plan.drains]


def foreign_gpu_processes(fleet: Fleet) -> list[str]:
    """A line for each process on a GPU that no replica of ctl's holds: started by hand, or
    by something else. ctl never stops it (it is not proven ours); the GPU is not used."""
    lines = []
    for view in fleet.snapshot.nodes:
        facts = fleet.facts.get(view.name)
        if facts is None or not facts.gpus or not facts.gpu_processes or view.gpus is None:
            continue
        index = {gpu.uuid: gpu.index for gpu in facts.gpus}
        held = {gpu.index for gpu in view.gpus if gpu.held_by is not None}
        for process in facts.gpu_processes:
            gpu = index.get(process.gpu_uuid)
            if gpu is not None and gpu not in held:
                name = process.process_name.rsplit("/", 1)[-1]
                lines.append(
                    f"{view.name} GPU {gpu}: pid {process.pid} {name} is not ctl's:"
                    " left running, the GPU not used"
                )
    return lines


def note_outcome(record: PassRecord, outcome: Outcome) -> None:
    """What the pass did on the nodes, what failed, and what it left for the next."""
    record.did += [f"stopped {replica}" for replica in outcome.stopped]
    record.did += [
        f"withdrew {replica} from the routers (its nodes are lost: stopped once they answer)"
        for replica in outcome.withdrawn_lost
    ]
    record.did += [
        f"stopped {replica} but its ranks on {', '.join(nodes)} (lost: stopped once they answer)"
        for replica, nodes in outcome.stopped_but_lost.items()
    ]
    record.did += [f"started {replica}" for replica in outcome.started]
    record.did += [f"renewed the certificate of {node}" for node in outcome.renewed]
    record.could_not += [f"start {r}: {why}" for r, why in outcome.failed.items()]
    record.could_not += [f"stop {r}: {why}" for r, why in outcome.stop_failures.items()]
    record.could_not += [f"drain {r}: {why}" for r, why in outcome.undrained.items()]
    record.could_not += [f"update the routers: {why}" for why in outcome.route_failures]
    record.could_not += [f"renew {n}: {why}" for n, why in outcome.not_renewed.items()]
    record.left_undone += outcome.left_undone


def last_pass_file(state: Path) -> Path:
    return state / LAST_PASS


def unwritable(state: Path) -> str | None:
    """Why the controller could not keep its state in `state`; None when it can."""
    try:
        state.mkdir(parents=True, exist_ok=True, mode=0o700)
        atomic_write(state / ".controller-check", b"", 0o600).unlink()
    except OSError as error:
        return f"state directory {state} is not writable: {error.strerror or error}"
    return None


def lasting_sessions() -> SessionPool:
    """Where the controller keeps each node's SSH session from pass to pass (docs/scale.md):
    one socket a node, so the soft limit on open files is raised to the hard one first
    (systemd's default soft limit, 1,024, would cap the pool below a thousand nodes), and
    the pool holds what that leaves beside SPARE_DESCRIPTORS."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):  # an infinite hard limit the kernel caps lower
            pass
    return SessionPool(max(0, soft - SPARE_DESCRIPTORS))


Event = Callable[[str, dict[str, Any]], None]  # (kind, fields): one log line each


def watch(
    run_pass: Callable[[PassRecord], int],
    interval: float,
    state: Path,
    dry_run: bool,
    log: Event,
    stop: StopRequest = STOP,
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    after: Callable[[PassRecord, datetime], list[str]] = lambda _record, _ended: [],
) -> int:
    """Run a pass every `interval` seconds until asked to stop; 0 then.

    `run_pass` fills in its record and returns its exit code; whatever it raises (bar an
    abort) is that pass's error, and the loop goes on. `after` is given each pass's record
    once it is complete, with the time it ended, and says what it could not do."""
    number = 0

    def say_stopping() -> None:  # at once, not when the step under way ends
        if stop.wait(float("inf")):
            log("stopping", {"signal": stop.signal})

    saying = threading.Thread(target=say_stopping, name="stop-said", daemon=True)
    saying.start()
    while not stop.requested():
        number += 1
        record = PassRecord(number, clock(), dry_run)
        began = time.monotonic()
        log("pass-started", {"pass": number})
        try:
            record.exit_code = run_pass(record)
        except SystemExit as exit_:  # said by the pass already (bad input: its file and line)
            record.exit_code = exit_.code if isinstance(exit_.code, int) else 1
            record.error = record.error or f"the pass ended with exit code {record.exit_code}"
        except Aborted:
            raise
        except Exception as error:  # one pass's failure, never the controller's end
            record.exit_code = 1
            record.error = _one_line(error)
        record.seconds = time.monotonic() - began
        problems = after(record, clock())
        why = _save(record, state)
        log("pass", record.document())
        for problem in [*([why] if why is not None else []), *problems]:
            log("error", {"message": problem})
        if stop.wait(interval):
            break
    saying.join(timeout=5)  # "stopping" before "stopped"
    log("stopped", {"signal": stop.signal, "passes": number})
    return 0


def _save(record: PassRecord, state: Path) -> str | None:
    document = json.dumps(record.document(), indent=2) + "\n"
    try:
        atomic_write(last_pass_file(state), document, 0o644)
    except OSError as error:
        return f"could not write {last_pass_file(state)}: {error.strerror or error}"
    return None


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text}" if text else type(error).__name__
