"""Reading the catalog from its file (catalog.load.load_catalog): the file's text is parsed
under the file's name, and a file that cannot be read is an input error naming it.

Mutation testing found load_catalog reached by no unit or property test.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cli.catalog.load import load_catalog
from cli.errors import InputError, InputProblem

CATALOG = """\
models:
  m:
    source: hf://org/m
    replicas: {min: 2}
    profiles:
      - {name: x1, priority: 1, engine: vllm, gpu_class: H100, gpus_per_node: 1}
"""


def test_a_catalog_file_is_read_and_parsed(tmp_path: Path) -> None:
    path = tmp_path / "catalog.yaml"
    path.write_text(CATALOG, encoding="utf-8")
    catalog = load_catalog(path)
    assert list(catalog.models) == ["m"]
    model = catalog.models["m"]
    assert (model.replicas_min, [p.name for p in model.profiles]) == (2, ["x1"])


def test_a_problem_in_the_file_names_the_file_and_the_line(tmp_path: Path) -> None:
    path = tmp_path / "catalog.yaml"
    path.write_text(CATALOG.replace("priority: 1, ", ""), encoding="utf-8")
    with pytest.raises(InputError) as caught:
        load_catalog(path)
    assert str(caught.value) == f"{path}:6: models.m.profiles[0]: missing required key 'priority'"


def test_a_missing_file_is_an_input_error_with_the_reason(tmp_path: Path) -> None:
    path = tmp_path / "nope.yaml"
    with pytest.raises(InputError) as caught:
        load_catalog(path)
    assert caught.value.problems == (
        InputProblem(str(path), None, (), "cannot read: No such file or directory"),
    )
    assert str(caught.value) == f"{path}: cannot read: No such file or directory"


def test_a_directory_is_not_a_catalog(tmp_path: Path) -> None:
    with pytest.raises(InputError) as caught:
        load_catalog(tmp_path)
    assert str(caught.value) == f"{tmp_path}: cannot read: not a regular file but a directory"


def test_a_fifo_is_not_a_catalog_and_is_not_waited_on(tmp_path: Path) -> None:
    fifo = tmp_path / "catalog.yaml"
    os.mkfifo(fifo)
    with pytest.raises(InputError) as caught:
        load_catalog(fifo)
    assert str(caught.value) == f"{fifo}: cannot read: not a regular file but a FIFO"
