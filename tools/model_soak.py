"""Run N random examples of the model-based exactness test and print the tally.

    .venv/bin/python tools/model_soak.py --examples 100
    .venv/bin/python tools/model_soak.py --examples 40 --bootstrap 127.0.0.1:9092

Runs ``tests/integration/test_model_exactness.py`` with random (not derandomized) programs and
Hypothesis' shrinking on, against a fresh local broker (or ``--bootstrap``) and a local Spark
session, both stopped at the end. Prints what the examples did (runs, clears, transactions,
deletions, reported losses) and exits non-zero with the shrunk failing program if the property
broke.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=50, help="programs to run (default 50)")
    parser.add_argument("--bootstrap", help="an external broker instead of a fresh local one")
    args = parser.parse_args()
    if args.examples < 1:
        parser.error("--examples must be at least 1")
    env = {**os.environ, "MODEL_EXAMPLES": str(args.examples), "MODEL_SOAK": "1"}
    if args.bootstrap:
        env["KAFKA_BOOTSTRAP_SERVERS"] = args.bootstrap
    test = "tests/integration/test_model_exactness.py"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", test, "-q", "-s", "-p", "no:cacheprovider",
         "-o", "timeout=0"], cwd=ROOT, env=env, capture_output=True, text=True)
    output = proc.stdout + proc.stderr
    tally = output.split("MODEL TALLY ", 1)[1].split("\n}", 1)[0] + "\n}" \
        if "MODEL TALLY " in output else None
    if tally is not None:
        print(json.dumps(json.loads(tally), indent=1))
    if proc.returncode != 0:
        failures = output.split("= FAILURES =", 1)[-1]
        print("\n".join(line for line in failures.splitlines() if line.strip() and not (
            line.startswith(("%", "[Stage")) or " WARN " in line or " INFO " in line))[-12000:])
        print(f"FAILED (pytest exit {proc.returncode})")
    else:
        print(f"{args.examples} example(s): the property held")
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
