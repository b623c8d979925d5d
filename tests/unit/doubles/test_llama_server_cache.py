"""The cached llama-server build (tests/models/llama_server.py) is used only when it is
the one the module makes: configured with its cmake options, and able to serve TLS."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.models import llama_server
from tests.models.llama_server import (
    CMAKE_OPTIONS,
    COMPLETE,
    DIR_ENV,
    OPTIONS_FILE,
    WITHOUT_TLS,
    build_llama_server,
    installed_llama_server,
    stale,
)

# What each kind of binary says about TLS (tools/server/server-http.cpp).
WITH_TLS = b"\x7fELF...running without SSL\n..."
NO_TLS = b"\x7fELF..." + WITHOUT_TLS + b"\n..."


def a_build(root: Path, binary: bytes, log: str | None = None, options: str | None = None) -> Path:
    """A finished build's directory, as build_llama_server leaves it."""
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "llama-server").write_bytes(binary)
    if log is not None:
        (root / "build.log").write_text(log)
    if options is not None:
        (root / OPTIONS_FILE).write_text(options)
    (root / COMPLETE).touch()
    return root


def configure_line(options: tuple[str, ...]) -> str:
    return f"$ nice -n 19 cmake -S /w/src -B /w/build {' '.join(options)}\n"


def test_a_build_with_the_modules_options_and_tls_is_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = a_build(tmp_path / "b", WITH_TLS, options="\n".join(CMAKE_OPTIONS) + "\n")
    monkeypatch.setenv(DIR_ENV, str(root))
    assert stale(root) is None
    assert installed_llama_server().root == root


def test_a_build_from_before_the_options_were_recorded_is_judged_by_its_log(
    tmp_path: Path,
) -> None:
    log = configure_line(CMAKE_OPTIONS) + "-- OpenSSL found: 3.0.22\n$ nice -n 19 cmake --build x\n"
    assert stale(a_build(tmp_path / "same", WITH_TLS, log=log)) is None
    older = tuple(o for o in CMAKE_OPTIONS if o != "-DLLAMA_OPENSSL=ON")
    why = stale(a_build(tmp_path / "older", WITH_TLS, log=configure_line(older)))
    assert why is not None and why.startswith("configured with other cmake options (")
    assert stale(a_build(tmp_path / "no-log", WITH_TLS)) == (
        "configured with other cmake options (unknown)"
    )


def test_a_build_with_other_options_or_without_tls_is_refused_saying_how_to_build_it_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = a_build(tmp_path / "other", WITH_TLS, options="-DCMAKE_BUILD_TYPE=Debug\n")
    monkeypatch.setenv(DIR_ENV, str(other))
    with pytest.raises(RuntimeError) as refused:
        installed_llama_server()
    assert str(refused.value) == (
        f"llama-server {llama_server.VERSION} in {other} was configured with other cmake"
        " options (-DCMAKE_BUILD_TYPE=Debug): scripts/build_llama_server builds it again"
    )
    plain = a_build(tmp_path / "plain", NO_TLS, options="\n".join(CMAKE_OPTIONS))
    monkeypatch.setenv(DIR_ENV, str(plain))
    with pytest.raises(RuntimeError, match=r"was built without TLS \(cmake found no OpenSSL"):
        installed_llama_server()


def test_the_build_script_builds_a_stale_build_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Here it gets as far as looking for cmake (none on this PATH): the old build is no
    longer marked complete, so neither the tests nor a later run take it."""
    root = a_build(tmp_path / "b", NO_TLS, options="\n".join(CMAKE_OPTIONS))
    monkeypatch.setenv(DIR_ENV, str(root))
    monkeypatch.setenv("PATH", str(tmp_path / "no-tools"))
    with pytest.raises(RuntimeError, match=r"^no cmake: apt-get install cmake g"):
        build_llama_server()
    assert not (root / COMPLETE).exists()
