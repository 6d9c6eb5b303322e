"""Executed warp instructions by SASS opcode, from Nsight Compute's source page (PROFILE_REPORT's .source.csv, here
xz-compressed), for each file given: python notebook/decode-rows/opcodes.py FILE.csv.xz ..."""

import collections
import csv
import io
import lzma
import sys

for path in sys.argv[1:]:
    with lzma.open(path) as f:
        rows = list(csv.reader(io.TextIOWrapper(f, encoding="utf-8")))
    header = rows[1]  # rows[0] names the kernel
    source, executed = header.index("Source"), header.index("Instructions Executed")
    counts: collections.Counter[str] = collections.Counter()
    for row in rows[2:]:
        words = row[source].split() if len(row) > executed else []
        if not words or not row[executed].replace(",", "").isdigit():
            continue
        opcode = words[1] if words[0].startswith("@") else words[0]  # past a predicate guard
        counts[opcode.split(".")[0]] += int(row[executed].replace(",", ""))
    print(f"{path}: {sum(counts.values())} warp instructions")
    print("  " + ", ".join(f"{op} {n}" for op, n in counts.most_common(24)))
