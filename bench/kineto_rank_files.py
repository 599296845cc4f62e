#!/usr/bin/env python3
"""Writes rank files of one job from a Kineto (PyTorch profiler) template.

DIR/template.json (written by make_big_kineto.py) becomes
DIR/prof/rank{R}.pt.trace.json for R in [FIRST, LAST), each the template with
its distributedInfo rank R and world size N. Used by many_rank_kineto.sh and
many_rank_by_file.sh.
"""
import json
import sys

d, n = sys.argv[1], int(sys.argv[2])
first = int(sys.argv[3]) if len(sys.argv) > 3 else 0
last = int(sys.argv[4]) if len(sys.argv) > 4 else n
text = open(f"{d}/template.json").read()
body = text[text.index('"traceEvents": ['):]
head = json.loads(text[:text.index('"traceEvents": [')].rstrip().rstrip(",") + "}")
for r in range(first, last):
    head["distributedInfo"] = dict(head.get("distributedInfo", {}), rank=r, world_size=n)
    with open(f"{d}/prof/rank{r}.pt.trace.json", "w") as f:
        f.write(json.dumps(head)[:-1] + ", " + body)
