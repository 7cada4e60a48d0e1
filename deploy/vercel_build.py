"""`vercel build` from exactly what `vercel deploy` uploads, outside the work tree.

    python deploy/vercel_build.py          # dist/vercel/.vercel/output, then:
    cd dist/vercel && npx vercel deploy --prebuilt

Vercel's Python builder installs from the first manifest it finds: in the work tree that is
pyproject.toml (which declares no dependencies: `make` installs them from requirements*.txt),
and it writes uv.lock, .python-version, build/ and *.egg-info beside it. The upload that
`vercel deploy` sends leaves pyproject.toml out (.vercelignore), so Vercel's own build installs
requirements.txt. This script builds the same way locally: it copies the files .vercelignore
lets through into a staging folder (dist/vercel), links it to the project (.vercel/project.json
from `vercel link`), and runs the pinned CLI's `vercel build` there. The work tree is left as it
was; whatever the builder writes stays in the staging folder.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pathspec

ROOT = Path(__file__).resolve().parent.parent
STAGING = ROOT / "dist" / "vercel"
VERCEL = ROOT / "node_modules" / ".bin" / "vercel"


def upload_set(source: Path = ROOT) -> list[str]:
    """The files under `source` that `vercel deploy` uploads: all that .vercelignore lets
    through (ignored folders are not walked)."""
    ignore = pathspec.GitIgnoreSpec.from_lines((source / ".vercelignore").read_text().splitlines())
    found = []
    for folder, subfolders, files in os.walk(source):
        relative = Path(folder).relative_to(source)
        subfolders[:] = sorted(
            name for name in subfolders if not ignore.match_file(f"{(relative / name).as_posix()}/")
        )
        for name in sorted(files):
            path = (relative / name).as_posix()
            if not ignore.match_file(path):
                found.append(path)
    return found


def stage(target: Path = STAGING, source: Path = ROOT) -> Path:
    """Copy the upload set into `target` (emptied first, but its .vercel/project.json kept)."""
    link = target / ".vercel" / "project.json"
    kept = link.read_bytes() if link.exists() else None
    shutil.rmtree(target, ignore_errors=True)
    for path in upload_set(source):
        (target / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source / path, target / path)
    if kept is not None:
        link.parent.mkdir(parents=True, exist_ok=True)
        link.write_bytes(kept)
    return target


def build(staging: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run the pinned `vercel build` in `staging`; its output goes to staging/.vercel/output."""
    if not (staging / ".vercel" / "project.json").exists():
        raise SystemExit(
            f"{staging}/.vercel/project.json is missing: run `npx vercel link` in the work tree "
            "first (this script copies its .vercel/project.json)"
        )
    return subprocess.run(
        [str(VERCEL), "build", "--yes"],
        cwd=staging,
        env=env,
        capture_output=True,
        text=True,
    )


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args(argv)
    staging = stage()
    link = ROOT / ".vercel" / "project.json"
    if link.exists() and not (staging / ".vercel" / "project.json").exists():
        (staging / ".vercel").mkdir(parents=True, exist_ok=True)
        shutil.copy2(link, staging / ".vercel" / "project.json")
    result = build(staging)
    sys.stdout.write(result.stdout)
    sys.stderr.write(result.stderr)
    if result.returncode == 0:
        print(f"\nbuilt {staging.relative_to(ROOT)}/.vercel/output; to ship it:")
        print(f"  cd {staging.relative_to(ROOT)} && npx vercel deploy --prebuilt")
    return result.returncode


if __name__ == "__main__":
    sys.exit(main())
