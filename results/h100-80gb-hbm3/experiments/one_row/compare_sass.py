"""Whether two builds of lab/_C.abi3.so run the same machine code: every kernel of the first build is looked up in
the second (cluster_resident_softmax_kernel by its name less the ONE_ROW template argument, false there; the one-row
kernels, ONE_ROW true, are new) and their SASS instruction text compared (cuobjdump -sass, the offsets dropped).

    cuobjdump -sass OLD.so > old.sass; cuobjdump -sass NEW.so > new.sass; python compare_sass.py old.sass new.sass
"""

import re
import sys

FUNCTION = re.compile(r"Function : (\S+)")
INSTRUCTION = re.compile(r"\s+/\*[0-9a-f]{4}\*/\s+(.*?);")


def functions(path: str) -> dict[str, list[str]]:
    """Each kernel's instructions, in order, as text without their offsets."""
    out: dict[str, list[str]] = {}
    body: list[str] | None = None
    with open(path) as f:
        for line in f:
            m = FUNCTION.search(line)
            if m:
                body = out.setdefault(m.group(1), [])
                continue
            m = INSTRUCTION.match(line)
            if m and body is not None:
                body.append(re.sub(r"\s+", " ", m.group(1)))
    return out


def old_name(new: str) -> str | None:
    """A new build's kernel name as the old build spelled it; None for a one-row kernel (ONE_ROW true: new)."""
    if "cluster_resident_softmax_kernel" not in new:
        return new
    assert new.count("ELb0EEEvPKT_") + new.count("ELb1EEEvPKT_") == 1, new
    if "ELb1EEEvPKT_" in new:
        return None
    return new.replace("ELb0EEEvPKT_", "EEEvPKT_")


def main(old_path: str, new_path: str) -> int:
    old, new = functions(old_path), functions(new_path)
    renamed = {old_name(n): body for n, body in new.items() if old_name(n)}
    same = [k for k in old if renamed.get(k) == old[k]]
    differ = [k for k in old if k in renamed and renamed[k] != old[k]]
    missing = [k for k in old if k not in renamed]
    print(f"kernels in the old build: {len(old)}; in the new: {len(new)} ({len(new) - len(renamed)} one-row)")
    print(f"old kernels whose SASS is identical in the new build: {len(same)}; different: {len(differ)}; "
          f"not found: {len(missing)}")
    for k in differ + missing:
        print(" ", "differs" if k in differ else "missing", k)
    return 1 if differ or missing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
