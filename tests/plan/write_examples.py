#!/usr/bin/env python3
"""Writes every example plan of loom.plan, fused and unfused, for 1-8 ranks, into DIR/fused and
DIR/unfused (for plan_test's executor runs). Imports the DSL without the compiled module."""
import pathlib
import sys

root = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(root / "python" / "loom"))
import plan  # noqa: E402  (loom/plan as a top-level package: pure Python)

out = pathlib.Path(sys.argv[1])
for n in range(1, 9):
    plan.write_examples(out / "fused", n, fuse=True)
    plan.write_examples(out / "unfused", n, fuse=False)
print(f"wrote {len(list(out.rglob('*.json')))} plans to {out}")
