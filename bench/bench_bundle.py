"""Bundle size: the Lambda zip `make bundle` builds and serverless.yml ships
(dist/aircoach-lambda.zip; built first when missing): files, zipped and unzipped size, the
largest packages."""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from deploy.bundle import ZIP, build


def main() -> None:
    if not ZIP.exists():
        build()
    with zipfile.ZipFile(ZIP) as bundle:
        infos = [i for i in bundle.infolist() if not i.is_dir()]
    unzipped = sum(i.file_size for i in infos) / 2**20
    by_top: dict[str, int] = {}
    for info in infos:
        top = info.filename.split("/")[0].split("-")[0]
        by_top[top] = by_top.get(top, 0) + info.file_size
    print(
        f"Lambda bundle {ZIP.name} (requirements.txt, python 3.12 manylinux, without boto3): "
        f"{len(infos)} files, {ZIP.stat().st_size / 2**20:.1f} MB zipped, "
        f"{unzipped:.1f} MB unzipped (target < 150 MB)"
    )
    for name, size in sorted(by_top.items(), key=lambda kv: -kv[1])[:8]:
        print(f"  {size / 2**20:6.1f} MB  {name}")


if __name__ == "__main__":
    main()
