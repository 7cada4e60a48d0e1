"""Bundle size: `pip install --target` of requirements.txt as Lambda would get it (boto3 and its
dependencies come with the Lambda runtime, so they are left out), unzipped size."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUNTIME_PROVIDED = ("boto3", "botocore", "s3transfer", "jmespath")


def size_mb(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 2**20


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        target = Path(tmp) / "package"
        reqs = Path(tmp) / "requirements.txt"
        lines = [
            line
            for line in (ROOT / "requirements.txt").read_text().splitlines()
            if not line.strip().startswith(RUNTIME_PROVIDED)
        ]
        reqs.write_text("\n".join(lines))
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "--quiet",
                "--target",
                str(target),
                "--platform",
                "manylinux2014_x86_64",
                "--implementation",
                "cp",
                "--python-version",
                "3.12",
                "--only-binary=:all:",
                "-r",
                str(reqs),
            ],
            check=True,
        )
        for name in RUNTIME_PROVIDED:
            for path in target.glob(f"{name}*"):
                subprocess.run(["rm", "-rf", str(path)], check=True)
        total = size_mb(target)
        biggest = sorted(
            ((size_mb(p), p.name) for p in target.iterdir() if p.is_dir()), reverse=True
        )[:8]
        print(
            f"Lambda bundle (requirements.txt, python 3.12 manylinux, without boto3): {total:.1f} MB unzipped "
            f"(target < 150 MB)"
        )
        for mb, name in biggest:
            print(f"  {mb:6.1f} MB  {name}")


if __name__ == "__main__":
    main()
