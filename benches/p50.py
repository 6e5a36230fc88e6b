#!/usr/bin/env python3
"""Prints the median time per iteration (p50) of every criterion benchmark of the last run,
from target/criterion/*/*/new/sample.json (criterion itself prints the mean)."""
import glob
import json
import os
import statistics

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "target", "criterion")
for path in sorted(glob.glob(os.path.join(root, "*", "*", "new", "sample.json"))):
    with open(path) as f:
        s = json.load(f)
    per_iter = [t / n for t, n in zip(s["times"], s["iters"])]
    p50 = statistics.median(per_iter) / 1e6
    name = os.path.relpath(os.path.dirname(os.path.dirname(path)), root)
    print(f"{name:45s} p50 {p50:10.3f} ms")
