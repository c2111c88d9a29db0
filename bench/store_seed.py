"""Benchmark: a new project's first MLflow write, with the store MLflow migrates against the seeded one.

Each measurement is a fresh interpreter (a first command is one) with MLflow already imported,
timing from "no mlflow.db" to "an experiment exists and one run is logged":

  migrated  MlflowClient on a new sqlite file: MLflow creates its tables and runs every schema
            migration since its first release (what forge-ml did before)
  seeded    forge_ml.tracking.seed_sqlite_store copies the empty migrated store kept in forge-ml's
            cache (built once per MLflow version, before the timed runs), then the same writes

The two alternate; the verdict is the ratio of the medians. Bound: seeded / migrated <= 0.6 (what
is left is opening the store, where MLflow reads its migration scripts to check the schema's
revision, and the writes themselves).

    .venv/bin/python bench/store_seed.py [--repeats 7]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import median, ratio_range

BOUND = 0.6
CHILD = r"""
import sys, time
from pathlib import Path
from mlflow import MlflowClient
from forge_ml.tracking import seed_sqlite_store
db, seeded = Path(sys.argv[1]), sys.argv[2] == "seeded"
uri = f"sqlite:///{db}"
started = time.perf_counter()
if seeded:
    seed_sqlite_store(uri)
client = MlflowClient(tracking_uri=uri)
run = client.create_run(client.create_experiment("bench"))
client.log_metric(run.info.run_id, "dev/loss", 0.5)
client.set_terminated(run.info.run_id)
print(time.perf_counter() - started)
"""


def first_write(folder: Path, kind: str, n: int) -> float:
    db = folder / f"{kind}-{n}.db"
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(db), kind],
        capture_output=True,
        text=True,
        check=True,
        env=os.environ,
    )
    return float(out.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="forge-store-bench-") as tmp:
        folder = Path(tmp)
        os.environ["FORGE_ML_CACHE"] = str(folder / "cache")
        first_write(folder, "seeded", -1)  # builds the template (once per MLflow version), untimed
        times: dict[str, list[float]] = {"migrated": [], "seeded": []}
        for n in range(args.repeats):
            for kind in ("migrated", "seeded") if n % 2 == 0 else ("seeded", "migrated"):
                times[kind].append(first_write(folder, kind, n))
    migrated, seeded = median(times["migrated"]), median(times["seeded"])
    ratio = seeded / migrated
    print(f"{'':10} {'median s':>9}  runs (s)")
    for kind, values in times.items():
        print(f"{kind:10} {median(values):9.3f}  {' '.join(f'{v:.2f}' for v in values)}")
    print(
        f"seeded / migrated = {ratio:.3f} (per-run range {ratio_range(times['seeded'], times['migrated'])}) "
        f"bound <= {BOUND}: {'PASS' if ratio <= BOUND else 'FAIL'}"
    )
    return 0 if ratio <= BOUND else 1


if __name__ == "__main__":
    raise SystemExit(main())
