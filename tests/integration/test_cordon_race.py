"""Two operators cordoning different nodes of one inventory at once lose no edit.

scripts/bench/bench_cordon_race.py starts `ctl cordon node-a` and `ctl cordon node-b` at the same
moment on one hosts.yml that names both inline, so each reads, plans and writes the same
file: without the fleet's lock (cli/edges/lock.py) the second write undoes the first or
fails half-way. Eight races here (the script's 40 are the figure the README reports).
"""

from __future__ import annotations

from tests.integration.test_benchmarks import bench


def test_concurrent_cordons_of_one_file_all_land() -> None:
    figures = bench("bench_cordon_race.py", "--races", "8", timeout=600)

    assert figures["races"] == 8
    assert figures["lost"] == 0
    assert figures["failed"] == 0
