"""The Lambda bundle: exactly the app and its runtime dependencies, for python3.12 on x86_64.

    python deploy/bundle.py build   # dist/aircoach-lambda.zip (make bundle)
    python deploy/bundle.py check   # list it, fail on anything local (make bundle-check)

`build` asks pip for manylinux wheels of requirements.txt (`--platform manylinux2014_x86_64
--python-version 3.12 --only-binary=:all:`), so it needs no Docker. boto3 and its dependencies
come with the Lambda runtime and are left out. The app's folders are copied from the work
tree (without caches); nothing else of the work tree is. Two steps then make the cold start
short and keep the zip small; they need python3.12 and binutils' `strip` on the host (Linux):

- every module is compiled by python3.12 (`__pycache__/*.cpython-312.pyc`, unchecked-hash: the
  bundle never changes once built). Lambda's `/var/task` is read-only, so without them every
  cold start compiles every module it imports, in memory, again: a cold chat took 7.2-7.6 s
  instead of 3.4 s (`bench/bench_bundle.py`);
- the debug sections of the wheels' native libraries are stripped (`strip --strip-debug`: the
  code and its symbols stay): 81 MB of `.so` become 34 MB, which pays for the bytecode.

The zip's root also holds `run.sh` (from deploy/), the streaming function's handler: the
Lambda Web Adapter runs it, and it starts uvicorn (`python3 -m aircoach serve`) on `$PORT`.

`check` accepts a file only if a distribution in the zip installed it (its RECORD lists it), it
is one of the app's files, or it is a module's python3.12 bytecode beside it; it fails on a
module without that bytecode, and among the app's files refuses the local things by name:
`.env*`, the data dir, SQLite files, the dev issuer key, dead letters, caches. Anything else
(`tests/`, `bench/`, `.venv`, `node_modules`, a stray file) is neither, and fails. It also
fails when the entry script is missing or not executable (Lambda could not start it).
"""

from __future__ import annotations

import argparse
import csv
import fnmatch
import glob
import io
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path, PurePosixPath

ROOT = Path(__file__).resolve().parent.parent
ZIP = ROOT / "dist" / "aircoach-lambda.zip"

# The app: the Lambda handler's package and what it reads at run time.
APP_FOLDERS = ("aircoach", "functions", "prompt_docs")
# Scripts at the zip's root: the Web Adapter function's handler (serverless.yml `stream`).
ENTRY_SCRIPTS = ("run.sh",)
ENTRY_MODE = 0o755
# Provided by the Lambda Python runtime (and ~25 MB): not bundled.
RUNTIME_PROVIDED = ("boto3", "botocore", "s3transfer", "jmespath")
PLATFORM = ("--platform", "manylinux2014_x86_64", "--implementation", "cp")
PYTHON_VERSION = "3.12"
BYTECODE_TAG = "cpython-312"  # the .pyc the runtime reads (the same for every 3.12.x)

# Local things that must never ship, whatever else the check allows.
FORBIDDEN = (
    ".env",
    ".env.*",
    ".aircoach",
    "*.sqlite3",
    "*.sqlite3-*",
    "dev_issuer_key.pem",
    "tests",
    "bench",
    ".venv",
    "node_modules",
    "__pycache__",
    "*.pyc",
    ".pytest_cache",
    ".mypy_cache",
    ".ruff_cache",
    ".git",
    ".serverless",
    ".vercel",
    "deadletter",
)


def build(target: Path = ZIP) -> Path:
    """Build the zip at `target` (replacing it); returns its path."""
    with tempfile.TemporaryDirectory() as tmp:
        staging = Path(tmp) / "bundle"
        requirements = Path(tmp) / "requirements.txt"
        requirements.write_text(_runtime_requirements())
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "--no-compile",  # .pyc of this host's Python would be useless on 3.12
                "--target",
                str(staging),
                *PLATFORM,
                "--python-version",
                PYTHON_VERSION,
                "--only-binary=:all:",
                "-r",
                str(requirements),
            ],
            check=True,
        )
        shutil.rmtree(staging / "bin", ignore_errors=True)  # console scripts: unused on Lambda
        for folder in APP_FOLDERS:
            shutil.copytree(
                ROOT / folder,
                staging / folder,
                ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".*"),
            )
        for script in ENTRY_SCRIPTS:
            shutil.copyfile(ROOT / "deploy" / script, staging / script)
            (staging / script).chmod(ENTRY_MODE)  # whatever the checkout's mode
        _strip_debug_sections(staging)
        _compile_for_runtime(staging)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp_zip = target.with_suffix(".tmp")
        with zipfile.ZipFile(tmp_zip, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as bundle:
            for path in sorted(staging.rglob("*")):
                if path.is_file():
                    bundle.write(path, path.relative_to(staging).as_posix())
        tmp_zip.replace(target)
    return target


def python312() -> Path:
    """The real python3.12 binary: from PATH or pyenv's versions. A pyenv shim will not do: it
    runs pyenv's global version when 3.12 is not selected."""
    pyenv_root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    candidates = [shutil.which("python3.12")]
    candidates += sorted(glob.glob(str(pyenv_root / "versions" / "3.12*" / "bin" / "python3.12")))
    for candidate in filter(None, candidates):
        asked = subprocess.run(
            [candidate, "-c", "import sys; print(sys.version_info[:2] == (3, 12), sys.executable)"],
            capture_output=True,
            text=True,
        )
        is_312, _, executable = asked.stdout.strip().partition(" ")
        if asked.returncode == 0 and is_312 == "True":
            return Path(executable)
    raise SystemExit(
        "python3.12 (Lambda's runtime) is not installed, on PATH or in pyenv: the bundle's "
        "modules are compiled with it"
    )


def _compile_for_runtime(staging: Path) -> None:
    """Every module's bytecode for python3.12, beside it (`__pycache__`). Unchecked hashes:
    the runtime reads them without comparing the source's timestamp, which a zip keeps only
    to 2 s in local time, and nothing in the bundle changes once it is built. `-s`: the file
    names inside are the modules' paths in the bundle, not the build's temporary folder."""
    subprocess.run(
        [
            str(python312()),
            "-m",
            "compileall",
            "-q",
            "-j",
            "0",
            "--invalidation-mode",
            "unchecked-hash",
            "-s",
            str(staging),
            str(staging),
        ],
        check=True,
    )


def _strip_debug_sections(staging: Path) -> None:
    """Drop the debug sections of the native libraries (ELF files only): what runs, and the
    symbol names a crash report shows, stay."""
    strip = shutil.which("strip")
    if strip is None:
        raise SystemExit("binutils' strip is not installed: the bundle would exceed 150 MB")
    libraries = [path for path in staging.rglob("*.so*") if path.is_file() and _is_elf(path)]
    if libraries:
        subprocess.run([strip, "--strip-debug", *map(str, libraries)], check=True)


def _is_elf(path: Path) -> bool:
    with path.open("rb") as file:
        return file.read(4) == b"\x7fELF"


def unzip_as_lambda(archive: Path, folder: Path) -> Path:
    """Extract like Lambda does: with each file's mode from the zip (zipfile drops it)."""
    with zipfile.ZipFile(archive) as zipped:
        for info in zipped.infolist():
            path = Path(zipped.extract(info, folder))
            mode = info.external_attr >> 16
            if not info.is_dir() and mode:
                path.chmod(stat.S_IMODE(mode))
    return folder


def _runtime_requirements() -> str:
    lines = (ROOT / "requirements.txt").read_text().splitlines()
    return "\n".join(line for line in lines if not _names_one_of(line, RUNTIME_PROVIDED)) + "\n"


def _names_one_of(line: str, names: tuple[str, ...]) -> bool:
    name = line.split("#")[0].strip().split("[")[0]
    for cut in "<>=!~ ;":
        name = name.split(cut)[0]
    return name.lower() in names


def problems(names: list[str], recorded: set[str]) -> list[str]:
    """Why each unexpected file of the zip should not be there (empty: a clean bundle).
    `recorded`: the files the bundled distributions installed (their RECORD). Bytecode is
    accepted only for the runtime and beside its module (`build` compiles it); any other
    `.pyc` or `__pycache__` is a local cache."""
    found = []
    in_zip = set(names)
    for name in names:
        parts = PurePosixPath(name).parts
        top = parts[0]
        source = bytecode_source(name)
        if source is not None and source in in_zip:
            continue
        if top in RUNTIME_PROVIDED or top.startswith(tuple(f"{p}-" for p in RUNTIME_PROVIDED)):
            found.append(f"{name}: provided by the Lambda runtime")
        elif name in recorded:
            continue  # installed by pip from a wheel: a package's own file
        elif any(fnmatch.fnmatch(part, pattern) for part in parts for pattern in FORBIDDEN):
            found.append(f"{name}: a local file")
        elif top not in APP_FOLDERS and name not in ENTRY_SCRIPTS:
            found.append(f"{name}: neither the app's nor an installed distribution's")
    return found


def bytecode_source(name: str) -> str | None:
    """The module `name` is the runtime's bytecode of (`a/__pycache__/b.cpython-312.pyc` ->
    `a/b.py`), or None."""
    path = PurePosixPath(name)
    suffix = f".{BYTECODE_TAG}.pyc"
    if path.parent.name != "__pycache__" or not path.name.endswith(suffix):
        return None
    return str(path.parent.parent / (path.name[: -len(suffix)] + ".py"))


def uncompiled(names: list[str]) -> list[str]:
    """The modules of the zip without their bytecode for the runtime (a cold start would
    compile them)."""
    compiled = {bytecode_source(name) for name in names}
    return [name for name in names if name.endswith(".py") and name not in compiled]


def entry_problems(infos: list[zipfile.ZipInfo]) -> list[str]:
    """What keeps Lambda from running the entry scripts: missing, or not executable."""
    modes = {info.filename: info.external_attr >> 16 for info in infos}
    found = []
    for script in ENTRY_SCRIPTS:
        if script not in modes:
            found.append(f"{script}: missing (the streaming function's handler)")
        elif not modes[script] & stat.S_IXUSR:
            found.append(f"{script}: not executable (mode {modes[script] & 0o777:o})")
    return found


def recorded_in(bundle: zipfile.ZipFile) -> set[str]:
    """Every file the distributions in the zip installed (their RECORD files)."""
    files: set[str] = set()
    for name in bundle.namelist():
        if name.endswith(".dist-info/RECORD"):
            rows = csv.reader(io.StringIO(bundle.read(name).decode()))
            files.update(row[0] for row in rows if row)
    return files


def check(path: Path = ZIP) -> int:
    """Print the bundle's contents by top-level folder; 1 if it holds anything local or its
    entry script cannot run."""
    if not path.exists():
        print(f"{path} does not exist: run make bundle first", file=sys.stderr)
        return 1
    with zipfile.ZipFile(path) as bundle:
        infos = [i for i in bundle.infolist() if not i.is_dir()]
        recorded = recorded_in(bundle)
    names = [i.filename for i in infos]
    missing_bytecode = uncompiled(names)
    found = problems(names, recorded) + entry_problems(infos)
    found += [
        f"{name}: no {BYTECODE_TAG} bytecode (build compiles every module)"
        for name in missing_bytecode
    ]
    by_top: dict[str, tuple[int, int]] = {}
    for info in infos:
        top = info.filename.split("/")[0]
        count, size = by_top.get(top, (0, 0))
        by_top[top] = (count + 1, size + info.file_size)
    unzipped = sum(i.file_size for i in infos)
    shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    print(f"{shown}: {len(infos)} files, {path.stat().st_size / 2**20:.1f} MB")
    print(f"unzipped {unzipped / 2**20:.1f} MB (Lambda's limit: 250 MB; our target < 150 MB)")
    for top, (count, size) in sorted(by_top.items(), key=lambda kv: -kv[1][1]):
        print(f"  {size / 2**20:7.2f} MB  {count:5d} files  {top}")
    if found:
        print(f"\n{len(found)} problems: not fit to ship", file=sys.stderr)
        for line in found[:50]:
            print(f"  {line}", file=sys.stderr)
        return 1
    print("\nno local file: every file is the app's or an installed distribution's")
    print(f"entry scripts executable: {', '.join(ENTRY_SCRIPTS)}")
    modules = sum(1 for name in names if name.endswith(".py"))
    print(f"every module ({modules}) has its {BYTECODE_TAG} bytecode")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["build", "check"])
    args = parser.parse_args(argv)
    if args.command == "build":
        print(f"built {build().relative_to(ROOT)}")
        return 0
    return check()


if __name__ == "__main__":
    sys.exit(main())
