#!/usr/bin/env python3
"""The mutation score of the pure core: how many small deliberate bugs the tests catch.

mutmut (pinned in constraints.txt, configured under [tool.mutmut] in pyproject.toml)
mutates cli/placement, cli/cluster, cli/reconcile/planner.py, cli/catalog and
cli/facts/parse.py, one change at a time (`<` for `<=`, `+ 1` for `- 1`, a string changed, an
argument dropped...), and runs, for each mutant, the tests of tests/unit and tests/property
that reach the mutated function. A mutant is killed when one of them fails.

The run is on a clone of the committed tree (HEAD, or --rev), in a temporary directory, so
a half-edited work tree never changes the figure. It prints the counts, the score (killed ÷
all mutants: a survivor counts against it however harmless it is), and every survivor: file,
line, function and the mutation. scripts/mutation_harmless.toml lists the survivors known to
be harmless (equivalent mutants) with the reason; survivors are reported as "N (M listed
harmless, K unexplained)". With --json the last line is one JSON object with the figures.
Exit 0 when the score is at least --goal percent (default 90), 1 when not, 2 when the run
itself failed.

Not part of scripts/test: a full run takes tens of minutes. Run it in the background and
nice'd on a shared machine: `nice -n 10 scripts/mutation`. Two things keep it as short as
it can honestly be: each mutant's tests run fastest first (scripts/mutation_order.py), so
most mutants die in a unit test within a second; and Hypothesis runs under the `mutation`
profile (tests/conftest.py): the `ci` profile's examples without shrinking a failure.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import tomllib
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv"
VENV_PYTHON = VENV / "bin" / "python"
HARMLESS = Path("scripts/mutation_harmless.toml")  # in the clone: the committed list
MUTMUT_VERSION = "3.8.1"
PROGRESS_SECONDS = 120

# mutmut's statuses, grouped as the report counts them
KILLED = {"killed", "caught by type check"}
SURVIVED = {"survived", "no tests"}
TIMEOUT = {"timeout"}
SUSPICIOUS = {"suspicious", "segfault"}

PROGRESS = re.compile(r"(\d+)/(\d+)\s+🎉 (\d+) 🫥 (\d+)\s+⏰ (\d+)\s+🤔 (\d+)\s+🙁 (\d+)")


# --- the environment ---------------------------------------------------------------------


def installed_mutmut(python: Path) -> str | None:
    probe = "import importlib.metadata as m; print(m.version('mutmut'))"
    result = subprocess.run([str(python), "-c", probe], capture_output=True, text=True, check=False)
    return result.stdout.strip() if result.returncode == 0 else None


def ensure_venv() -> None:
    """Make .venv and install the `mutation` extra in it when missing; then run in it."""
    if not VENV_PYTHON.exists():
        print(f"making {VENV}", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    if installed_mutmut(VENV_PYTHON) != MUTMUT_VERSION:
        print(f"installing mutmut {MUTMUT_VERSION} into {VENV} (extra `mutation`)", flush=True)
        subprocess.run(
            [
                str(VENV_PYTHON),
                *("-m", "pip", "install", "--quiet", "--disable-pip-version-check"),
                *("-c", str(ROOT / "constraints.txt")),
                "-e",
                f"{ROOT}[test,mutation]",
            ],
            check=True,
        )
    if Path(sys.prefix).resolve() != VENV.resolve():
        os.execv(str(VENV_PYTHON), [str(VENV_PYTHON), str(Path(__file__).resolve()), *sys.argv[1:]])


def git(*args: str, cwd: Path) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, check=True
    ).stdout.strip()


def clone(rev: str, into: Path) -> str:
    commit = git("rev-parse", "--verify", f"{rev}^{{commit}}", cwd=ROOT)
    subprocess.run(["git", "clone", "--quiet", "--no-checkout", str(ROOT), str(into)], check=True)
    git("checkout", "--quiet", "--detach", commit, cwd=into)
    return commit


def uncopied(tree: Path) -> list[str]:
    """Top-level paths of the tree that mutmut would not copy into mutants/."""
    config = tomllib.loads((tree / "pyproject.toml").read_text())["tool"]["mutmut"]
    copied = {*config["source_paths"], *config.get("also_copy", []), "tests", "pyproject.toml"}
    top = {name.split("/")[0] for name in git("ls-files", cwd=tree).splitlines()}
    return sorted(top - {str(Path(p)) for p in copied})


# --- the run -----------------------------------------------------------------------------


def run_mutmut(tree: Path, workers: int, log: Path, max_examples: int | None) -> tuple[int, float]:
    env = dict(os.environ)
    env["HYPOTHESIS_PROFILE"] = "mutation"
    env.pop("MUTATION_MAX_EXAMPLES", None)
    if max_examples is not None:
        env["MUTATION_MAX_EXAMPLES"] = str(max_examples)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(tree / "scripts"), env.get("PYTHONPATH", "")) if p
    )
    env["PYTEST_ADDOPTS"] = " ".join(
        p for p in (env.get("PYTEST_ADDOPTS", ""), "-p mutation_order") if p
    )
    command = [sys.executable, "-m", "mutmut", "run", "--max-children", str(workers)]
    start = time.monotonic()
    with log.open("wb") as out:
        process = subprocess.Popen(command, cwd=tree, env=env, stdout=out, stderr=subprocess.STDOUT)
        next_report = start + PROGRESS_SECONDS
        while process.poll() is None:
            time.sleep(2)
            if time.monotonic() >= next_report:
                next_report += PROGRESS_SECONDS
                print(f"  {progress(log)} after {minutes(time.monotonic() - start)}", flush=True)
    return process.returncode, time.monotonic() - start


def progress(log: Path) -> str:
    tail = log.read_bytes()[-4000:].decode("utf-8", "replace")
    found = PROGRESS.findall(tail)
    if not found:
        step = [s.strip() for s in re.split(r"[\r\n]", tail) if s.strip()]
        return f"mutmut: {step[-1][:80] if step else 'starting'}"
    done, total, killed, no_tests, timeout, suspicious, survived = found[-1]
    return (
        f"{done}/{total} mutants tried: {killed} killed, {int(survived) + int(no_tests)} "
        f"survived, {timeout} timed out, {suspicious} suspicious"
    )


def minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min"


# --- the results -------------------------------------------------------------------------


@dataclass(frozen=True)
class Survivor:
    file: str
    line: int
    function: str
    status: str  # "survived" | "no tests"
    removed: tuple[str, ...]  # the original lines the mutant changes, stripped
    added: tuple[str, ...]  # what it puts there, stripped
    diff: str
    name: str  # mutmut's name for it (shifts as code changes: not a key)

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.file, self.function, "\n".join(self.removed), "\n".join(self.added))

    def mutation(self) -> str:
        before = " / ".join(self.removed) or "(nothing)"
        after = " / ".join(self.added) or "(removed)"
        return f"{before}  →  {after}"


@dataclass(frozen=True)
class Harmless:
    file: str
    function: str
    line: str
    mutated: str
    why: str

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.file, self.function, self.line.strip(), self.mutated.strip())


def load_harmless(path: Path) -> list[Harmless]:
    if not path.exists():
        return []
    entries = tomllib.loads(path.read_text()).get("mutant", [])
    return [
        Harmless(
            file=e["file"],
            function=e["function"],
            line="\n".join(s.strip() for s in e["line"].strip().splitlines()),
            mutated="\n".join(s.strip() for s in e["mutated"].strip().splitlines()),
            why=" ".join(e["why"].split()),
        )
        for e in entries
    ]


def function_span(module: ast.Module, function: str, cls: str | None) -> tuple[int, int] | None:
    body: list[ast.stmt] = module.body
    if cls is not None:
        owner = next((n for n in body if isinstance(n, ast.ClassDef) and n.name == cls), None)
        if owner is None:
            return None
        body = owner.body
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == function:
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            return first, node.end_lineno or node.lineno
    return None


HUNK = re.compile(r"^@@ -(\d+)(?:,\d+)? \+\d+(?:,\d+)? @@")


def changed_lines(diff: str) -> tuple[int, tuple[str, ...], tuple[str, ...]]:
    """The offset of the first changed line within the function, the removed and added lines."""
    offset = 0
    first: int | None = None
    removed: list[str] = []
    added: list[str] = []
    position = 0
    for line in diff.splitlines():
        if line.startswith(("---", "+++")):
            continue
        hunk = HUNK.match(line)
        if hunk:
            position = int(hunk.group(1))
            continue
        if line.startswith("-"):
            removed.append(line[1:].strip())
            first = position if first is None else first
            position += 1
        elif line.startswith("+"):
            added.append(line[1:].strip())
            first = position if first is None else first
        else:
            position += 1
    offset = (first or 1) - 1
    return offset, tuple(removed), tuple(added)


def source_line(lines: list[str], span: tuple[int, int] | None, offset: int, text: str) -> int:
    """The line in the file: the diff's position, checked against the text, else the nearest
    line of the function with that text."""
    if span is None:
        return 0
    guess = span[0] + offset
    if text and not (0 < guess <= len(lines) and lines[guess - 1].strip() == text):
        matches = [n for n in range(span[0], span[1] + 1) if lines[n - 1].strip() == text]
        if matches:
            guess = min(matches, key=lambda n: abs(n - guess))
    return guess


def collect(tree: Path) -> tuple[Counter[str], list[Survivor]]:
    """Read mutmut's results in the clone: the count per status and the survivors."""
    os.chdir(tree)
    from mutmut.mutation.data import SourceFileMutationData
    from mutmut.mutation.diff_apply import get_diff_for_mutant
    from mutmut.stats import status_by_exit_code
    from mutmut.utils.file_utils import walk_mutatable_files
    from mutmut.utils.format_utils import orig_function_and_class_names_from_key

    counts: Counter[str] = Counter()
    survivors: list[Survivor] = []
    for path in walk_mutatable_files():
        data = SourceFileMutationData(path=path)
        data.load()
        if not data.exit_code_by_key:
            continue
        text = Path(path).read_text()
        lines = text.splitlines()
        module = ast.parse(text)
        for name, exit_code in sorted(data.exit_code_by_key.items()):
            status = status_by_exit_code[exit_code]
            counts[status] += 1
            if status not in SURVIVED:
                continue
            function, cls = orig_function_and_class_names_from_key(name)
            diff = get_diff_for_mutant(name, path=path)
            offset, removed, added = changed_lines(diff)
            span = function_span(module, function, cls)
            line = source_line(lines, span, offset, removed[0] if removed else "")
            survivors.append(
                Survivor(
                    file=str(path),
                    line=line,
                    function=f"{cls}.{function}" if cls else function,
                    status=status,
                    removed=removed,
                    added=added,
                    diff=diff,
                    name=name,
                )
            )
    survivors.sort(key=lambda s: (s.file, s.line, s.name))
    return counts, survivors


# --- the report --------------------------------------------------------------------------


def diff_body(diff: str) -> list[str]:
    """The changed lines of mutmut's diff, with one line of context either side."""
    lines = [line for line in diff.splitlines() if not line.startswith(("---", "+++", "@@"))]
    changed = [i for i, line in enumerate(lines) if line[:1] in "+-"]
    if not changed:
        return []
    return lines[max(changed[0] - 1, 0) : changed[-1] + 2]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--goal", type=float, default=90.0, help="percent killed (default 90)")
    parser.add_argument("--json", action="store_true", help="end with a JSON summary line")
    parser.add_argument("--rev", default="HEAD", help="the commit to measure (default HEAD)")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--survivors", type=Path, help="also write the survivors' list here")
    parser.add_argument("--keep", action="store_true", help="keep the clone (mutants/ in it)")
    parser.add_argument(
        "--max-examples",
        type=int,
        help="cap each property test at this many Hypothesis examples (a faster run whose "
        "score is a lower bound; default: the tests' own counts)",
    )
    args = parser.parse_args()
    survivors_file: Path | None = args.survivors.resolve() if args.survivors else None

    ensure_venv()
    workdir = Path(tempfile.mkdtemp(prefix="modelfleet-mutation-"))
    tree = workdir / "tree"
    try:
        commit = clone(args.rev, tree)
        started = datetime.now(UTC)
        cap = "" if args.max_examples is None else f", ≤ {args.max_examples} examples a property"
        print(
            f"mutation score of the pure core: commit {commit[:12]}, mutmut {MUTMUT_VERSION}, "
            f"{args.workers} workers{cap}, in {tree}",
            flush=True,
        )
        for path in uncopied(tree):
            print(f"  warning: {path} is not in [tool.mutmut] also_copy: the tests will not see it")
        log = workdir / "mutmut.log"
        code, seconds = run_mutmut(tree, args.workers, log, args.max_examples)
        if code != 0:
            tail = log.read_bytes()[-6000:].decode("utf-8", "replace").replace("\r", "\n")
            print("\n".join(line for line in tail.splitlines() if line.strip())[-4000:])
            print(f"mutmut failed (exit {code}); its log: {log}", file=sys.stderr)
            args.keep = True
            return 2
        counts, survivors = collect(tree)
        harmless_entries = load_harmless(tree / HARMLESS)
        report(args, commit, started, seconds, counts, survivors, harmless_entries, survivors_file)
        total = sum(counts.values())
        killed = sum(counts[s] for s in KILLED)
        if counts["not checked"]:
            print(f"incomplete: {counts['not checked']} mutants were not run", file=sys.stderr)
            return 2
        return 0 if total and killed * 100 >= args.goal * total else 1
    finally:
        if args.keep:
            print(f"kept {workdir}")
        else:
            with contextlib.suppress(OSError):
                os.chdir(ROOT)
            subprocess.run(["rm", "-rf", str(workdir)], check=False)


def report(
    args: argparse.Namespace,
    commit: str,
    started: datetime,
    seconds: float,
    counts: Counter[str],
    survivors: list[Survivor],
    harmless_entries: list[Harmless],
    survivors_file: Path | None,
) -> None:
    by_key = {entry.key: entry for entry in harmless_entries}
    harmless = [s for s in survivors if s.key in by_key]
    unexplained = [s for s in survivors if s.key not in by_key]
    stale = [e for e in harmless_entries if e.key not in {s.key for s in survivors}]
    total = sum(counts.values())
    killed = sum(counts[s] for s in KILLED)
    survived = sum(counts[s] for s in SURVIVED)
    timeout = sum(counts[s] for s in TIMEOUT)
    suspicious = sum(counts[s] for s in SUSPICIOUS)
    other = total - killed - survived - timeout - suspicious
    score = killed / total if total else 0.0
    passed = score * 100 >= args.goal

    print()
    print("survivors (file:line function [status]: original → mutant):")
    for s in survivors:
        entry = by_key.get(s.key)
        tag = f"harmless: {entry.why}" if entry else "unexplained"
        print(f"  {s.file}:{s.line} {s.function} [{s.status}; {tag}]")
        for line in diff_body(s.diff):
            print(f"      {line}")
    if stale:
        print()
        print(f"listed harmless but not a survivor now ({len(stale)}; the list can lose them):")
        for e in stale:
            print(f"  {e.file} {e.function}: {e.line.splitlines()[0]}")
    rows = [
        ("mutants", f"{total}", ""),
        ("killed", f"{killed}", ""),
        (
            "survived",
            f"{survived}",
            f"{counts['no tests']} reached by no test; {len(harmless)} listed harmless, "
            f"{len(unexplained)} unexplained",
        ),
        ("timed out", f"{timeout}", "the tests did not finish: not counted as killed"),
        ("suspicious", f"{suspicious}", ""),
    ]
    if other:
        rows.append(("not run", f"{other}", ", ".join(f"{k} {v}" for k, v in counts.items())))
    rows += [
        (
            "score",
            f"{score:.1%}",
            f"killed ÷ mutants; goal ≥ {args.goal:g}%: {'PASS' if passed else 'FAIL'}",
        ),
        ("run time", minutes(seconds), f"started {started:%Y-%m-%d %H:%M} UTC"),
        (
            "examples",
            "all" if args.max_examples is None else f"≤ {args.max_examples}",
            "per property test" + ("" if args.max_examples is None else ": score a lower bound"),
        ),
    ]
    print()
    print(f"mutation score, commit {commit[:12]}:")
    for label, value, note in rows:
        print(f"  {label:<11} {value:>8}  {note}".rstrip())
    by_file = Counter(s.file for s in unexplained)
    if by_file:
        print("  unexplained by file: " + ", ".join(f"{f} {n}" for f, n in by_file.most_common()))

    if survivors_file is not None:
        survivors_file.write_text(
            "".join(
                f"{s.file}:{s.line}, {s.function}, {s.mutation()}"
                + (" [no tests]" if s.status == "no tests" else "")
                + (" [harmless]" if s.key in by_key else "")
                + "\n"
                for s in survivors
            )
        )
        print(f"  survivors written to {survivors_file}")
    if args.json:
        summary: dict[str, Any] = {
            "bench": "mutation",
            "commit": commit,
            "tool": f"mutmut {MUTMUT_VERSION}",
            "started": started.isoformat(timespec="seconds"),
            "seconds": round(seconds, 1),
            "workers": args.workers,
            "max_examples": args.max_examples,
            "mutants": total,
            "killed": killed,
            "survived": survived,
            "no_tests": counts["no tests"],
            "harmless": len(harmless),
            "unexplained": len(unexplained),
            "timeout": timeout,
            "suspicious": suspicious,
            "not_run": other,
            "score": round(score, 4),
            "goal": args.goal / 100,
            "pass": passed,
        }
        print(json.dumps(summary, separators=(",", ":")))


if __name__ == "__main__":
    sys.exit(main())
