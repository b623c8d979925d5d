"""A real llama-server for the tests, built once per machine from llama-cpp-python's sdist.

llama-cpp-python's source distribution on PyPI carries the whole llama.cpp tree under
`vendor/llama.cpp`: the server (`tools/server`) and vocabulary-only GGUF files
(`models/ggml-vocab-*.gguf`). `scripts/build_llama_server` (this module) downloads it with
pip and builds the `llama-server` target with cmake and g++: CPU only, static llama and
ggml libraries, no curl (llama.cpp has dropped it), OpenSSL on (`LLAMA_OPENSSL`: the server
can then serve TLS), no OpenMP (the test fleet's nodes have no libgomp; ggml's own thread
pool runs instead), no web UI (its assets would be downloaded). 14 minutes of CPU (33 minutes'
wall time measured on two cores with a load average of 7 to 10), once: the result is kept in
${MODELFLEET_LLAMA_DIR:-/var/tmp/modelfleet-llama/VERSION} (`bin/llama-server`, the
vocabularies in `models/`, `help.txt`: the binary's `--help`), and later runs and other
clones reuse it, unless it was made with other cmake options (recorded in
`cmake-options.txt`) or without TLS: then it is built again. The tests only look for it
(`installed_llama_server()`): a build of that length inside a test's time would make the
test's outcome the machine's load.

Standard library only: .ci/run runs it before the project's dependencies are installed.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path

# The llama-cpp-python release whose vendored llama.cpp the tests run (issue 14's pin).
VERSION = "0.3.36"
DIR_ENV = "MODELFLEET_LLAMA_DIR"
# Written last: a directory without it is a half-made one, made again.
COMPLETE = "modelfleet-complete"
# The options a build was configured with; a build with others is made again.
OPTIONS_FILE = "cmake-options.txt"
# Only in a server built without OpenSSL (tools/server/server-http.cpp), which cmake allows
# quietly: LLAMA_OPENSSL=ON without libssl-dev warns "HTTPS support disabled" and goes on.
WITHOUT_TLS = b"the server is built without SSL support"
CMAKE_OPTIONS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DLLAMA_CURL=OFF",  # deprecated and ignored by this llama.cpp; said for older ones
    "-DLLAMA_OPENSSL=ON",  # this tree's name for it (there is no LLAMA_SERVER_SSL)
    "-DGGML_OPENMP=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
)
JOBS = "2"


@dataclass(frozen=True)
class LlamaServer:
    """A finished build."""

    root: Path

    @property
    def binary(self) -> Path:
        return self.root / "bin" / "llama-server"

    @property
    def help_text(self) -> Path:
        return self.root / "help.txt"

    def vocabulary(self, name: str) -> Path:
        """`name` as in `ggml-vocab-NAME.gguf`, e.g. `llama-spm`."""
        return self.root / "models" / f"ggml-vocab-{name}.gguf"


def cache_dir() -> Path:
    default = Path("/var/tmp/modelfleet-llama") / VERSION
    return Path(os.environ.get(DIR_ENV, str(default)))


def _built_with(root: Path) -> list[str]:
    """The cmake options the build in `root` was configured with."""
    recorded = root / OPTIONS_FILE
    if recorded.exists():
        return recorded.read_text().split()
    # A build from before they were recorded: its configure step, as its log says it.
    try:
        log = (root / "build.log").read_text(errors="replace")
    except OSError:
        return []
    for line in log.splitlines():
        words = line.split()
        if words[:1] == ["$"] and "cmake" in words and "-S" in words:
            return [word for word in words if word.startswith("-D")]
    return []


def stale(root: Path) -> str | None:
    """Why the finished build in `root` is not the one this module makes; None if it is."""
    built_with = _built_with(root)
    if built_with != list(CMAKE_OPTIONS):
        return f"configured with other cmake options ({' '.join(built_with) or 'unknown'})"
    if WITHOUT_TLS in LlamaServer(root).binary.read_bytes():
        return "built without TLS (cmake found no OpenSSL: apt-get install libssl-dev)"
    return None


def installed_llama_server() -> LlamaServer:
    """The finished build; raises RuntimeError saying how to make it."""
    root = cache_dir()
    if not (root / COMPLETE).exists():
        raise RuntimeError(
            f"llama-server {VERSION} for the tests is not built in {root}:"
            " scripts/build_llama_server builds it (14 minutes of CPU, once per machine)"
        )
    why = stale(root)
    if why is not None:
        raise RuntimeError(
            f"llama-server {VERSION} in {root} was {why}:"
            " scripts/build_llama_server builds it again"
        )
    return LlamaServer(root)


def _say(message: str) -> None:
    print(f"build_llama_server: {message}", flush=True)


def _run(step: list[str], log: Path, timeout: float = 3600) -> None:
    _say("$ " + " ".join(step))
    with log.open("a") as out:
        out.write("$ " + " ".join(step) + "\n")
        out.flush()
        done = subprocess.run(
            step, stdout=out, stderr=subprocess.STDOUT, timeout=timeout, check=False
        )
    if done.returncode != 0:
        tail = log.read_text(errors="replace")[-3000:]
        raise RuntimeError(f"{step[0]} exited {done.returncode} (log: {log}):\n{tail}")


def _nice(step: list[str]) -> list[str]:
    """The machine is shared: the build yields to everything else."""
    return ["nice", "-n", "19", *step] if shutil.which("nice") else step


def _download(work: Path, log: Path) -> Path:
    archive = work / f"llama_cpp_python-{VERSION}.tar.gz"
    if archive.exists():
        _say(f"sdist already downloaded: {archive}")
        return archive
    _run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
         "--no-deps", "--no-binary", ":all:", "--dest", str(work),
         f"llama-cpp-python=={VERSION}"],
        log, timeout=1200,
    )  # fmt: skip
    if not archive.exists():
        raise RuntimeError(f"pip download left no {archive.name} in {work}")
    return archive


def _unpack(archive: Path, work: Path) -> Path:
    source = work / f"llama_cpp_python-{VERSION}" / "vendor" / "llama.cpp"
    if (source / "CMakeLists.txt").exists():
        _say(f"sources already unpacked: {source}")
        return source
    _say(f"unpacking {archive.name}")
    with tarfile.open(archive) as tar:
        tar.extractall(work, filter="data")
    if not (source / "tools" / "server").is_dir():
        raise RuntimeError(f"{archive.name} has no vendor/llama.cpp/tools/server")
    return source


def build_llama_server(keep_work: bool = False) -> LlamaServer:
    """The build, made if it is not there yet; raises RuntimeError saying why not."""
    root = cache_dir()
    if (root / COMPLETE).exists() and stale(root) is None:
        _say(f"llama-server {VERSION} already built: {root / 'bin' / 'llama-server'}")
        return LlamaServer(root)
    root.mkdir(parents=True, exist_ok=True)
    with (root.parent / f"{root.name}.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (root / COMPLETE).exists():
            why = stale(root)
            if why is None:
                return LlamaServer(root)
            _say(f"building again: the build in {root} was {why}")
            (root / COMPLETE).unlink()
            shutil.rmtree(root / "work" / "build", ignore_errors=True)  # cmake's old cache
        for tool in ("cmake", "c++"):
            if shutil.which(tool) is None:
                raise RuntimeError(f"no {tool}: apt-get install cmake g++ libssl-dev")
        started = time.monotonic()
        load = os.getloadavg()[0]
        work = root / "work"
        work.mkdir(exist_ok=True)
        log = root / "build.log"
        source = _unpack(_download(work, log), work)
        build = work / "build"
        _run(_nice(["cmake", "-S", str(source), "-B", str(build), *CMAKE_OPTIONS]), log)
        compiling = time.monotonic()
        _run(_nice(["cmake", "--build", str(build), "--target", "llama-server", "-j", JOBS]), log)
        built = build / "bin" / "llama-server"
        if WITHOUT_TLS in built.read_bytes():
            raise RuntimeError(
                "llama-server was built without TLS: cmake found no OpenSSL"
                f" (apt-get install libssl-dev; log: {log})"
            )
        server = LlamaServer(root)
        server.binary.parent.mkdir(exist_ok=True)
        shutil.copy2(built, server.binary)
        models = root / "models"
        models.mkdir(exist_ok=True)
        for vocabulary in sorted((source / "models").glob("ggml-vocab-*.gguf")):
            shutil.copy2(vocabulary, models / vocabulary.name)
        helped = subprocess.run(
            [str(server.binary), "--help"], capture_output=True, text=True, timeout=60, check=False
        )
        if helped.returncode != 0 or "--model" not in helped.stdout:
            raise RuntimeError(f"{server.binary} --help failed: {helped.stderr[-2000:]}")
        server.help_text.write_text(helped.stdout)
        seconds = time.monotonic() - started
        summary = (
            f"llama-server {VERSION} built in {seconds:.0f} s (compiling"
            f" {time.monotonic() - compiling:.0f} s, load average {load:.1f} at the start,"
            f" {os.cpu_count()} CPUs, {JOBS} jobs under nice 19)"
        )
        (root / "build-time.txt").write_text(summary + "\n")
        (root / OPTIONS_FILE).write_text("\n".join(CMAKE_OPTIONS) + "\n")
        if not keep_work:
            shutil.rmtree(work)
        (root / COMPLETE).touch()
        _say(summary)
        _say(f"binary: {server.binary}; vocabularies: {models}; --help: {server.help_text}")
        return server


def main(argv: list[str]) -> int:
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__)
        print("usage: scripts/build_llama_server [--keep-work]")
        return 0
    try:
        build_llama_server(keep_work="--keep-work" in argv)
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as error:
        print(f"build_llama_server: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
