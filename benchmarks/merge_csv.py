"""Concatenate CSV files with the same columns into a new file (never overwritten):
what the campaigns use to gather one-row runs of `kvcalc measure --step model`.

    python benchmarks/merge_csv.py OUT.csv PART.csv [PART.csv ...]
"""

import csv
import sys


def main(out: str, *parts: str) -> None:
    rows = [r for p in parts for r in csv.DictReader(open(p, newline=""))]
    if not rows:
        sys.exit(f"merge_csv: no rows in {', '.join(parts) or 'no files'}")
    with open(out, "x", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main(*sys.argv[1:])
