"""How far the lab's variants (softmax's, and cross-entropy's) can be trusted, measured on a GPU, written to trust.md
and trust.json.

    python scripts/trust.py --out results/<gpu>/trust [--cases 10000] [--sections LIST] [--skip-sanitizers]

1. Randomized differential testing (lab.fuzz): --cases seeded cases against float64 for every variant
   that can run, gradients included; mismatches with the command that reproduces each. The same for the
   cross_entropy variants and the loss alone's (python -m lab.fuzz --op cross_entropy, --op cross_entropy_loss:
   drawn logits, targets and options).
2. Large tensors: more than 2^31 elements, as many short rows and as few long rows, for every
   variant that claims the shape (the GPU tests' 64-bit indexing cases); lab.cross_entropy over more than 2^31
   logits through each of its kernels.
3. The four compute-sanitizer tools over every CUDA variant (scripts/sanitize.sh).
4. PyTorch citizenship, per variant: inside torch.compile(fullgraph=True), forward and, for the lab's own
   entries, backward (gradients against float64 on both sides of every backward threshold, three dtypes),
   captured in a CUDA graph
   and replayed, on a non-default stream, torch.library.opcheck (CUDA ops, .out included),
   bitwise-identical output across runs, `out` aliasing `x`.
5. Bad input, per variant: a CPU tensor, an integer and a float64 tensor, a non-contiguous last
   dimension, an empty tensor, a mismatched `out`: the right answer or a clear error naming the
   variant; a crash, a hang or a wrong result is a failure.
6. lab.cross_entropy through each of its kernels (ENTRY_CASES): eager, in place, inside torch.compile(fullgraph=
   True) forward and backward (and in place), captured in a CUDA graph with its backward and replayed, on a
   non-default stream, bitwise identical across runs, each result against float64; a target out of range a clear
   error.
7. lab.linear_cross_entropy through each of its paths (HEAD_ENTRY_CASES: one chunk, chunks summed in float32 over a
   padded vocabulary through the CUDA kernel, the per-row loss with the Triton kernel's options): eager, as
   LinearCrossEntropyLoss, inside torch.compile(fullgraph=True) forward and backward, captured in a CUDA graph with
   its backward and replayed, on a non-default stream, bitwise identical across runs, the loss and every gradient
   against float64; a target out of range a clear error.
Each cell is measured, never assumed: a property a variant cannot have (opcheck of a Triton kernel)
is marked n/a with the reason.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import torch

from lab import check, fuzz, operators
from lab.backends import cuda_variants
from lab.env import ROOT, environment, quiet_third_party
from lab.inputs import Shape, make_input
from lab.registry import Variant, dtype_name, variants

SOFTMAX = operators.get("softmax")
PASS, FAIL = "pass", "FAIL"
# The lab's own differentiable entries: lab.softmax, every torch.ops.lab softmax op, every Triton entry.
DIFFERENTIABLE_OWN = ("lab", "cuda", "triton")
COMPILED_BACKWARD = "compiled backward (fullgraph)"
FUZZ_LOSSES = {f"fuzz_{op}": op for op in fuzz.LOSSES}  # a section each: lab.fuzz --op cross_entropy(_loss)
ENTRIES = ("cross_entropy_entry", "linear_cross_entropy_entry")  # a loss entry's citizenship through its paths
SECTIONS = ("fuzz", *FUZZ_LOSSES, "large", "sanitizers", "citizenship", "bad_inputs", *ENTRIES)


def cell(ok: bool, why: str = "") -> dict:
    return {"result": PASS if ok else FAIL, "why": why}


def na(why: str) -> dict:
    return {"result": "n/a", "why": why}


def failure(e: Exception) -> str:
    """An exception as a cell's reason: its type and first line."""
    return f"{type(e).__name__}: {e}".splitlines()[0][:200]


def agrees(y: torch.Tensor, x: torch.Tensor) -> bool:
    """y is softmax(x) within the lab's tolerances (a float64 result: within float32's)."""
    tolerances = {torch.float64: SOFTMAX.tolerances[torch.float32], **SOFTMAX.tolerances}
    return check.compare(y, SOFTMAX.reference(x), x.dtype, tolerances=tolerances).ok


def on_side_stream(fn):
    """fn() on a new stream that waits for the current one's work, the current one then waiting for it."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        result = fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    return result


def citizenship(v: Variant) -> dict[str, dict]:
    kernel = v.kernel()
    # 64 rows of 1000, or of the longest row the variant takes where that is shorter (cuda.tiled_rows: 512)
    shape = Shape(64, min(1000, v.max_n or 1000))
    x = make_input(shape, torch.float32, "cuda", 3)
    torch._dynamo.reset()  # each variant compiles afresh (one code object for all would hit the recompile limit)

    def graph() -> bool:
        static = x.clone()
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):
            kernel(static)  # warm-up (compilation, allocation) outside the capture
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            y = kernel(static)
        static.copy_(make_input(shape, torch.float32, "cuda", 4))
        g.replay()
        torch.cuda.synchronize()
        return agrees(y, static)

    out = run_cells([
        ("torch.compile(fullgraph=True)", lambda: agrees(torch.compile(lambda t: kernel(t), fullgraph=True)(x), x)),
        ("CUDA graph capture and replay", graph),
        ("non-default stream", lambda: agrees(on_side_stream(lambda: kernel(x)), x)),
    ])
    if v.backend in DIFFERENTIABLE_OWN:
        cases = fuzz.backward_cases(v)
        failures = fuzz.compiled_backward_mismatches(v, cases)
        lengths = sorted({n for _, n in cases})
        beyond = [n for n in fuzz.backward_row_lengths() if n not in lengths]
        ran = (f"N = {', '.join(map(str, lengths))} in {', '.join(dict.fromkeys(dtype_name(d) for d, _ in cases))}"
               + (f"; N = {', '.join(map(str, beyond))} beyond its limit" if beyond else ""))
        more = f" (and {len(failures) - 3} more)" if len(failures) > 3 else ""
        out[COMPILED_BACKWARD] = cell(bool(cases) and not failures, "; ".join(failures[:3]) + more or ran)
    else:
        out[COMPILED_BACKWARD] = na("its autograd is its library's, not the lab's")
    if v.backend == "cuda":
        op = getattr(torch.ops.lab, cuda_variants.TORCH_OPS[v.key])

        def opcheck() -> bool:
            torch.library.opcheck(op.default, (x,))
            torch.library.opcheck(op.out, (x,), {"out": torch.empty_like(x)})
            return True

        out |= run_cells([("opcheck (.default and .out)", opcheck)])
    else:
        out["opcheck (.default and .out)"] = na("not a torch.library op")
    runs = [kernel(x) for _ in range(3)]
    torch.cuda.synchronize()
    out["bitwise identical across runs"] = cell(all(torch.equal(runs[0], r) for r in runs[1:]))
    if v.writes_out:
        try:
            z = x.clone()
            kernel(z, z)
            torch.cuda.synchronize()
            out["out aliasing x"] = cell(agrees(z, x))
        except Exception as e:
            # A clear refusal is a pass: aliasing is not silently wrong.
            clear = v.name.split(".", 1)[1] in str(e) or "alias" in str(e) or "overlap" in str(e)
            out["out aliasing x"] = cell(clear, f"refused: {e}".splitlines()[0][:200])
    else:
        out["out aliasing x"] = na("takes no out")
    return out


# lab.cross_entropy through each of its kernels (route_of): (vocabulary, options).
ENTRY_CASES = ((1000, {}), (32000, {"label_smoothing": 0.1}), (50257, {}))
ENTRY_ROWS = 64


def route_of(vocab: int, options: dict) -> str:
    """The kernel lab.cross_entropy runs for bfloat16 rows of `vocab` logits with these options and a gradient."""
    from triton_kernels import cross_entropy as kernels

    if kernels.whole_row_fits(vocab):
        return "triton.fused"
    x = torch.empty(1, vocab, dtype=torch.bfloat16, device="cuda")
    takes = kernels.cuda_takes(x, kernels.rows_like(x), options.get("label_smoothing", 0.0),
                               options.get("z_loss", 0.0), options.get("softcap"))
    return "cuda.cluster" if takes else "triton.looped"


def run_cells(cells: list[tuple[str, object]]) -> dict[str, dict]:
    """Each (name, fn) cell: pass where fn() is true; an exception fails it, with the exception as the reason."""
    out: dict[str, dict] = {}
    for name, fn in cells:
        try:
            out[name] = cell(fn())
        except Exception as e:  # the finding is the failure itself
            out[name] = cell(False, failure(e))
    return out


def identical_runs(run) -> bool:
    """run() (a tuple of tensors) three times: every result bitwise the first's."""
    runs = [run() for _ in range(3)]
    return all(torch.equal(a, b) for r in runs[1:] for a, b in zip(runs[0], r, strict=True))


def clear_target_error(call, entry: str) -> bool:
    """call() (the entry with a target out of range) raises a ValueError that names the entry and the target."""
    try:
        call()
    except ValueError as e:
        return entry in str(e) and "out of range" in str(e)
    return False


def cross_entropy_entry(vocab: int, options: dict) -> dict[str, dict]:
    """lab.cross_entropy's citizenship through one of its kernels (bfloat16, ENTRY_ROWS rows): its loss and gradient
    against float64 in each use, and a target out of range, which must be a clear error."""
    import lab
    from lab.operators.cross_entropy import CrossEntropyOptions

    op = operators.get("cross_entropy")
    logits, target, _ = op.make_inputs(Shape(ENTRY_ROWS, vocab), torch.bfloat16, "cuda", 7)
    case = (logits, target, CrossEntropyOptions(**options))

    def right(loss: torch.Tensor, grad: torch.Tensor) -> bool:
        return check.check(lambda *_: (loss.float(), grad), case, False, op=op).ok

    def step(x: torch.Tensor, fn=lab.cross_entropy, inplace: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        leaf = x.detach().clone().requires_grad_()
        loss = fn(leaf * 1 if inplace else leaf, target, inplace=inplace, **options)
        loss.backward()
        return loss.detach(), leaf.grad

    def compiled(inplace: bool) -> bool:
        torch._dynamo.reset()
        return right(*step(logits, torch.compile(lab.cross_entropy, fullgraph=True), inplace))

    def graph() -> bool:
        static = logits.detach().clone().requires_grad_()
        # The warm-up (Triton's compilation) outside the capture.
        on_side_stream(lambda: lab.cross_entropy(static, target, **options).backward())
        static.grad = None
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            loss = lab.cross_entropy(static, target, **options)
            loss.backward()
        fresh = op.make_inputs(Shape(ENTRY_ROWS, vocab), torch.bfloat16, "cuda", 8)[0]
        with torch.no_grad():
            static.copy_(fresh)
        g.replay()
        torch.cuda.synchronize()
        case_now = (fresh, target, case[2])
        return check.check(lambda *_: (loss.detach().float(), static.grad), case_now, False, op=op).ok

    bad = target.clone()
    bad[ENTRY_ROWS // 2] = vocab
    return run_cells([
        ("eager forward and backward", lambda: right(*step(logits))),
        ("in place (gradient over the logits)", lambda: right(*step(logits, inplace=True))),
        ("torch.compile(fullgraph=True), forward and backward", lambda: compiled(False)),
        ("torch.compile(fullgraph=True), in place", lambda: compiled(True)),
        ("CUDA graph capture and replay (forward and backward)", graph),
        ("non-default stream", lambda: right(*on_side_stream(lambda: step(logits)))),
        ("bitwise identical across runs", lambda: identical_runs(lambda: step(logits))),
        ("a target out of range: a clear error", lambda: clear_target_error(
            lambda: step(logits, lambda x, t, **kw: lab.cross_entropy(x, bad, **kw)), "lab.cross_entropy")),
    ])


# lab.linear_cross_entropy through each of its paths: (tokens, vocabulary, hidden size, options, bias, chunk_tokens).
HEAD_ENTRY_CASES = (
    (256, 1000, 512, {}, False, None),  # one chunk: the kernel reduces the mean, dW from one matmul
    (192, 50257, 256, {}, True, 64),  # chunks: dW and db summed in float32, a padded vocabulary, the CUDA kernel
    (128, 32000, 256, {"reduction": "none", "z_loss": 1e-4}, False, 48),  # per-row loss (the backward computes it
    # again), the options of the Triton kernel
)


def head_entry_label(tokens: int, vocab: int, hidden: int, options: dict, bias: bool, chunk: int | None) -> str:
    chunks = "one chunk" if chunk is None or chunk >= tokens else f"{-(-tokens // chunk)} chunks"
    return (f"lab.linear_cross_entropy: {chunks}, {route_of(vocab, options)} ("
            + ", ".join([f"{tokens} x {vocab}, K = {hidden}", *(f"{k} {v}" for k, v in options.items()),
                         *(["bias"] if bias else [])]) + ")")


def linear_cross_entropy_entry(tokens: int, vocab: int, hidden: int, options: dict, bias: bool,
                               chunk: int | None) -> dict[str, dict]:
    """lab.linear_cross_entropy's citizenship on one of its paths (bfloat16): its loss and its gradients in x, the
    weight and the bias against float64 in each use (eagerly, as LinearCrossEntropyLoss, compiled, captured in a CUDA
    graph, on a side stream), bitwise repeats, and a target out of range, which must be a clear error."""
    import lab
    from lab.operators.cross_entropy import CrossEntropyOptions

    op = operators.get("linear_cross_entropy")
    shape, spec = Shape(tokens, vocab, None, hidden), CrossEntropyOptions(**options)
    x, weight, target, b, _ = op.make_inputs(shape, torch.bfloat16, "cuda", 7, spec, bias)
    kwargs = {**options, "chunk_tokens": chunk}

    def right(results: tuple, inputs: tuple = (x, weight, target, b)) -> bool:
        return check.check(lambda *_: results, (*inputs, spec), False, op=op).ok

    def grads(loss: torch.Tensor, leaves: tuple) -> tuple:
        """(loss, dx, dweight, dbias) after loss.backward of the rows' sum (dbias empty without a bias)."""
        return (loss.detach().float(), leaves[0].grad, leaves[1].grad,
                leaves[2].grad if leaves[2] is not None else x.new_empty(0))

    def leaves() -> tuple:
        """Fresh copies of x, the weight and the bias (None without one) that require grad."""
        return tuple(None if t is None else t.detach().clone().requires_grad_() for t in (x, weight, b))

    def step(fn=lab.linear_cross_entropy, target=target) -> tuple:
        xs, ws, bs = held = leaves()
        loss = fn(xs, ws, target, bs, **kwargs)
        loss.backward(torch.ones_like(loss))
        return grads(loss, held)

    def module(xs, ws, t, bs, **kw):
        return lab.LinearCrossEntropyLoss(**kw)(xs, ws, t, bs)

    def compiled() -> bool:
        torch._dynamo.reset()
        return right(step(torch.compile(lab.linear_cross_entropy, fullgraph=True)))

    def graph() -> bool:
        static = leaves()
        # The warm-up (Triton's compilation, cuBLAS's workspace) outside the capture.
        on_side_stream(lambda: step())
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            loss = lab.linear_cross_entropy(static[0], static[1], target, static[2], **kwargs)
            loss.backward(torch.ones_like(loss))
        fresh = op.make_inputs(shape, torch.bfloat16, "cuda", 8, spec, bias)
        with torch.no_grad():
            for t, new in zip(static, (fresh[0], fresh[1], fresh[3]), strict=True):
                if t is not None:
                    t.copy_(new)
        g.replay()
        torch.cuda.synchronize()
        return right(grads(loss, static), (fresh[0], fresh[1], target, fresh[3]))

    bad = target.clone()
    bad[tokens // 2] = vocab
    return run_cells([
        ("eager forward and backward", lambda: right(step())),
        ("LinearCrossEntropyLoss (the module)", lambda: right(step(module))),
        ("torch.compile(fullgraph=True), forward and backward", compiled),
        ("CUDA graph capture and replay (forward and backward)", graph),
        ("non-default stream", lambda: right(on_side_stream(step))),
        ("bitwise identical across runs", lambda: identical_runs(step)),
        ("a target out of range: a clear error",
         lambda: clear_target_error(lambda: step(target=bad), "lab.linear_cross_entropy")),
    ])


def bad_inputs(v: Variant) -> dict[str, dict]:
    kernel = v.kernel()
    x = make_input(Shape(4, 10), torch.float32, "cuda", 5)
    cases = {
        "CPU tensor": (x.cpu(),),
        "int32 tensor": (torch.ones(4, 10, dtype=torch.int32, device="cuda"),),
        "float64 tensor": (x.double(),),
        "non-contiguous last dim": (torch.randn(10, 4, device="cuda").t(),),
        "empty tensor": (torch.empty(0, 10, device="cuda"),),
    }
    if v.writes_out:
        cases["mismatched out"] = (x, torch.empty(4, 11, device="cuda"))
    out: dict[str, dict] = {}
    # An error names what the user called: the variant, or the torch.ops.lab op it is (torch's own errors
    # are torch's, and a peer's are its package's).
    names = [v.name, v.name.split(".", 1)[1]]
    if v.backend == "cuda":
        names.append(f"lab::{cuda_variants.TORCH_OPS[v.key]}")
    if v.backend == "lab":
        names.append("lab.softmax")  # lab.auto times the Python entry lab.softmax
    for label, args in cases.items():
        try:
            y = kernel(*args)
            torch.cuda.synchronize()
        except Exception as e:
            message = str(e).splitlines()[0] if str(e) else type(e).__name__
            named = any(n in message for n in names) or v.backend in ("torch", "peer")
            out[label] = cell(named, f"error: {message[:160]}")
            continue
        # No error: the answer must be softmax of the input (an empty result for an empty input); a result for
        # an input without one (an integer tensor, an out of another shape) is a failure.
        first = args[0]
        right = label != "mismatched out" and y.shape == first.shape and (first.numel() == 0 or (
            first.is_floating_point() and agrees(y.to(first.dtype), first)))
        out[label] = cell(right, "returned a result" + ("" if right else ", wrong or for an input it should refuse"))
    return out


LARGE_TESTS = ("tests/test_gpu.py", "tests/test_cross_entropy.py")  # their 64bit tests: softmax's, cross-entropy's


def large_tensors() -> dict:
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", *LARGE_TESTS,
                           "-k", "64bit"], cwd=ROOT, capture_output=True, text=True)
    summary = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr[-300:]
    ids = re.findall(r"test_64bit_indexing\[([^\]]*)\]", proc.stdout)
    shapes = sorted({m for i in ids for m in re.findall(r"\d+x\d+", i)}, key=lambda s: int(s.split("x")[1]))
    kernels = sorted(set(re.findall(r"test_64bit_indexing_of_lab_cross_entropy\[([^\]]*)\]", proc.stdout)))
    return {"command": f"python -m pytest {' '.join(LARGE_TESTS)} -k 64bit", "returncode": proc.returncode,
            "summary": summary, "shapes": f"{', '.join(shapes) or 'none run'} (just over 2^31 elements)",
            "cross_entropy": f"lab.cross_entropy through {', '.join(kernels) or 'none run'} (bfloat16, just over 2^31 "
                             "logits; loss, gradient and the loss alone)"}


def sanitizers() -> dict:
    proc = subprocess.run(["bash", "scripts/sanitize.sh", "build/sanitizer"], cwd=ROOT, capture_output=True,
                          text=True)
    return parse_sanitizers(proc.stdout, proc.returncode)


def parse_sanitizers(text: str, returncode: int | None = None) -> dict:
    """The per-tool lines of scripts/sanitize.sh's output (`compute-sanitizer --tool T (exit E): SUMMARY`, each
    followed by the driver's `  <section>: ran K ... cases` and `  <section>: not run under T (why)` lines): one run
    of a tool per such line, several where the driver was split into parts (--op, --variant), their errors added up
    per tool. Without a return code (a saved summary), the run failed if a run exited non-zero or reported errors,
    or none is there."""
    runs = []
    for line in text.splitlines():
        if m := re.match(r"compute-sanitizer --tool (\w+) \(exit (\d+)\): (.*)", line):
            errors = re.search(r"(\d+) (errors|hazards)", m.group(3))
            runs.append({"tool": m.group(1), "exit": int(m.group(2)), "summary": m.group(3).strip(),
                         "errors": int(errors.group(1)) if errors else None, "ran": []})
        elif runs and (ran := re.match(r"  (\S.*: (ran \d+|not run) .*)", line)):
            runs[-1]["ran"].append(ran.group(1))
    tools = {}
    for tool in dict.fromkeys(r["tool"] for r in runs):
        same = [r for r in runs if r["tool"] == tool]
        errors = None if any(r["errors"] is None for r in same) else sum(r["errors"] for r in same)
        tools[tool] = {"exit": max(r["exit"] for r in same), "errors": errors,
                       "summary": same[0]["summary"] if len(same) == 1 else f"{errors} errors in {len(same)} runs"}
    if returncode is None:
        returncode = int(not tools or any(t["exit"] or t["errors"] != 0 for t in tools.values()))
    data = {"returncode": returncode, "tools": tools, "runs": runs}
    commits = set(re.findall(r"commit=(\w+)", text))
    if len(commits) > 1:
        raise SystemExit(f"trust: the sanitizer runs name several commits ({', '.join(sorted(commits))}): one report "
                         "is of one commit")
    if commits:
        data["commit"] = commits.pop()
        data["record"] = next(line for line in text.splitlines() if "commit=" in line).strip()
    return data


def fuzz_section(part: dict) -> str:
    """The section of trust.json a randomized run's JSON belongs to, by the operator lab.fuzz writes (--op)."""
    op = part.get("op", "softmax")
    return "fuzz" if op == "softmax" else f"fuzz_{op}"


def fuzz_settings(part: dict) -> tuple:
    """What parts of one randomized run share: the seed, --max-elements and --per-shape-cases."""
    return part.get("seed"), part.get("max_elements"), part.get("per_shape_cases")


def part_record(part: dict) -> dict:
    """A part as a section lists it: its cases' range, how many were asked, the variants it ran, its commit."""
    return {"start": part.get("start", 0), "cases": part["cases"], "asked": part.get("asked", part["cases"]),
            "variants": sorted(part["variants"]), "commit": part.get("commit")}


def merge_fuzz(parts: list[dict]) -> dict:
    """One randomized run from its parts (python -m lab.fuzz --start K): counts added, mismatches joined."""
    if len({fuzz_settings(p) for p in parts}) > 1:
        raise SystemExit("trust: the fuzz parts differ in seed, --max-elements or --per-shape-cases")
    merged = {**parts[0], "cases": sum(p["cases"] for p in parts), "variants": {},
              "parts": [part_record(p) for p in parts]}
    for part in parts:
        for name, c in part["variants"].items():
            into = merged["variants"].setdefault(name, {"cases": 0, "skipped": 0, "not drawn": 0, "mismatches": []})
            for key in ("cases", "skipped", "not drawn"):
                into[key] += c.get(key, 0)
            into["mismatches"] += c["mismatches"]
    return merged


def rerun_fuzz(section: dict, rerun: dict) -> dict:
    """The section with the variants that `rerun` ran taken from it alone (python -m lab.fuzz --only, run again at a
    later commit): their earlier counts replaced, their names dropped from the earlier parts; the other variants'
    counts and parts stay. Where the rerun ran every variant it is the section's one part, and its range is the
    section's."""
    if fuzz_settings(rerun) != fuzz_settings(section):
        raise SystemExit("trust: the rerun differs from its section in seed, --max-elements or --per-shape-cases")
    ran = set(rerun["variants"])
    parts = [{**p, "variants": [v for v in p["variants"] if v not in ran]} for p in section.get("parts", [])]
    parts = [p for p in parts if p["variants"]] + [part_record(rerun)]
    variants = {name: rerun["variants"].get(name, c) for name, c in section["variants"].items()}
    variants.update({name: c for name, c in rerun["variants"].items() if name not in variants})
    alone = {key: rerun.get(key) for key in ("start", "cases", "asked", "commit")} if len(parts) == 1 else {}
    return {**section, **alone, "variants": variants, "parts": parts}


def write_markdown(data: dict, path: Path) -> None:
    md = ["# softmax-lab: how far the variants can be trusted", "",
          f"Produced by `python scripts/trust.py` at commit `{data['environment']['commit']}` on "
          f"{data['environment'].get('gpu', 'CPU')}, {data['environment']['date']}.", ""]
    if left_out := [s for s in SECTIONS if s not in data.get("sections", SECTIONS)]:
        md += [f"Sections not run (`--sections {','.join(data['sections'])}`): {', '.join(left_out)}.", ""]
    for key in ("fuzz", *FUZZ_LOSSES):
        if key in data:
            md += fuzz_markdown(data[key])
    if "large" in data:
        md += ["## Large tensors (more than 2^31 elements)", "", f"{data['large']['shapes']}"
               + (f"; {data['large']['cross_entropy']}" if "cross_entropy" in data["large"] else "")
               + f": `{data['large']['command']}`: {data['large']['summary']}", ""]
    if "sanitizers" in data:
        san = data["sanitizers"]
        md += ["## compute-sanitizer over every CUDA variant", "",
               *([f"Run separately (scripts/sanitize.sh) at commit `{san.get('commit', 'not recorded')}`"
                  + (f"; its record: `{san['record']}`." if "record" in san else "."), ""]
                 if san.get("separate") else [])]
        if san.get("runs"):  # each run of a tool, with what the driver ran in it
            md += ["| tool | errors | summary | what it ran (the driver's sections, cases) and left out |",
                   "|---|---|---|---|",
                   *(f"| {r['tool']} | {r['errors']} | {r['summary']} | {'; '.join(r['ran'])} |" for r in san["runs"]),
                   ""]
        else:
            md += ["| tool | errors | summary |", "|---|---|---|",
                   *(f"| {t} | {r['errors']} | {r['summary']} |" for t, r in san["tools"].items()), ""]
    for title, key in (("PyTorch citizenship", "citizenship"), ("Bad input", "bad_inputs"),
                       ("lab.cross_entropy through each of its kernels (bfloat16, checked against float64)",
                        "cross_entropy_entry"),
                       ("lab.linear_cross_entropy through each of its paths (bfloat16, the loss and dx, dW, db "
                        "checked against float64)", "linear_cross_entropy_entry")):
        if key not in data:
            continue
        table = data[key]
        columns = list(dict.fromkeys(c for row in table.values() for c in row))
        md += [f"## {title}", ""]
        if key == "citizenship" and "compiled_backward" in data:
            cb = data["compiled_backward"]
            md += [f"{COMPILED_BACKWARD}: torch.compile(fullgraph=True, dynamic=False) of the entry, compiled afresh "
                   f"for each case, forward and backward of {cb['rows']} rows of N = "
                   f"{', '.join(map(str, cb['row_lengths']))} (both sides of every threshold where the lab's "
                   "backward changes kernel) in each dtype the entry takes; the gradient against float64.", ""]
        md += ["| variant | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
        for name, row in table.items():
            md.append(f"| `{name}` | " + " | ".join(row.get(c, {}).get("result", "") for c in columns) + " |")
        notes = [(name, c, r["why"]) for name, row in table.items() for c, r in row.items()
                 if r["why"] and (r["result"] != PASS or "beyond its limit" in r["why"])]
        md += ["", *(f"- `{n}`, {c}: {w}" for n, c, w in notes), ""]
    path.write_text("\n".join(md))


def fuzz_markdown(fz: dict) -> list[str]:
    op = fz.get("op", "softmax")
    outputs = {"cross_entropy": "loss and gradient", "linear_cross_entropy": "loss and gradients (dx, dW, db)"
               }.get(op, "loss")
    against = (f"against the float64 {outputs}, targets and options drawn per case (a variant that lacks a case's "
               "options skips it)" if op in fuzz.LOSSES else
               "against float64 torch.softmax, gradients on every tenth float32 case")
    md = [f"## Randomized differential testing{'' if op == 'softmax' else ': ' + op}", "",
          ("Seeded cases in the parts below" if len(fz.get("parts", [])) > 1 else
           f"{fz['cases']} seeded cases") + f" (seed {fz['seed']}, M * N up to "
          f"{fz.get('max_elements', 'the default')}) {against}.", "",
          *(f"- cases {p['start']} to {p['start'] + p['cases'] - 1}"
            + (f" at commit `{p['commit']}`" if p.get("commit") else "")
            + (f" ({p['cases']} of the {p['asked']} asked: the run was stopped there)"
               if p.get("asked", p["cases"]) > p["cases"] else "") + ": "
            + (f"all {len(p['variants'])} variants" if set(p["variants"]) == set(fz["variants"])
               else ", ".join(f"`{v}`" for v in p["variants"]))
            for p in fz.get("parts", [])), "",
          "| variant | cases | skipped (shape or dtype it does not take) | not drawn (compiled per shape: first "
          f"{fz['per_shape_cases']} cases only) | mismatches |", "|---|---|---|---|---|"]
    for name, c in fz["variants"].items():
        md.append(f"| `{name}` | {c['cases']} | {c['skipped']} | {c['not drawn']} | {len(c['mismatches'])} |")
    for name, c in fz["variants"].items():
        for m in c["mismatches"][:5]:
            md.append(f"\n- `{name}`: {m['problem']} (`{m['repro']}`)")
    return [*md, ""]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--cases", type=int, default=10000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-elements", type=int, default=2**24, help="M * N at most per random case (default 2^24)")
    p.add_argument("--per-shape-cases", type=int, default=fuzz.PER_SHAPE_CASES,
                   help="cases for a variant compiled per shape")
    p.add_argument("--fuzz-json", type=Path, nargs="+", help="take the randomized testing's results from these "
                   "files (python -m lab.fuzz --json at the same commit, one per part of a run split with --start) "
                   "instead of running it")
    p.add_argument("--sections", default=",".join(SECTIONS), metavar="LIST",
                   help=f"the sections to run, comma-separated, of {','.join(SECTIONS)} (default all)")
    p.add_argument("--skip-sanitizers", action="store_true", help="leave out section 3 (it takes minutes)")
    p.add_argument("--refuzz", action="store_true", help="no GPU needed: replace the randomized testing in "
                   "OUT/trust.json with the parts given by --fuzz-json (a part run later; each file to the section "
                   "of its operator) and rewrite trust.md")
    p.add_argument("--rerun-json", type=Path, nargs="+", help="with --refuzz: parts that ran some variants again "
                   "(python -m lab.fuzz --only, at a later commit): each replaces those variants' counts in its "
                   "operator's section (applied after --fuzz-json), the other variants' stay")
    p.add_argument("--sanitizer-summary", type=Path, nargs="+", help="with --refuzz: take section 3 from the saved "
                   "output of scripts/sanitize.sh: a `bash scripts/remote/gpu.sh sanitize` run's checks.txt (its "
                   "header names the commit), or a file for each part where the tools or the driver ran in parts "
                   "(a line `commit=<hash>` in them, the same in all)")
    args = p.parse_args()
    args.sections = [s.strip() for s in args.sections.split(",") if s.strip()]
    if unknown := [s for s in args.sections if s not in SECTIONS]:
        p.error(f"--sections: unknown {', '.join(unknown)}; choose from {', '.join(SECTIONS)}")
    if args.skip_sanitizers:
        args.sections = [s for s in args.sections if s != "sanitizers"]
    if (args.sanitizer_summary or args.rerun_json) and not args.refuzz:
        sys.exit("trust: --sanitizer-summary and --rerun-json go with --refuzz (a GPU run runs the sanitizers and "
                 "the randomized testing itself)")
    if args.refuzz:
        if not args.fuzz_json and not args.rerun_json:
            sys.exit("trust: --refuzz needs --fuzz-json or --rerun-json")
        data = json.loads((args.out / "trust.json").read_text())
        by_section: dict[str, list[dict]] = {}  # each JSON to its operator's section
        for path in args.fuzz_json or []:
            part = json.loads(path.read_text())
            by_section.setdefault(fuzz_section(part), []).append(part)
        for section, parts in by_section.items():
            data[section] = merge_fuzz(parts)
        for path in args.rerun_json or []:
            rerun = json.loads(path.read_text())
            section = fuzz_section(rerun)
            if section not in data:
                sys.exit(f"trust: {path} reruns variants of {section}, which {args.out / 'trust.json'} does not have")
            data[section] = rerun_fuzz(data[section], rerun)
            by_section.setdefault(section, [])
        data["sections"] = [s for s in SECTIONS if s in {*data.get("sections", SECTIONS), *by_section}
                            or (s == "sanitizers" and args.sanitizer_summary)]
        if args.sanitizer_summary:
            text = "\n".join(path.read_text() for path in args.sanitizer_summary)
            data["sanitizers"] = {**parse_sanitizers(text), "separate": True}
            if not data["sanitizers"]["tools"]:
                sys.exit(f"trust: no `compute-sanitizer --tool` line in {' '.join(map(str, args.sanitizer_summary))}")
        (args.out / "trust.json").write_text(json.dumps(data, indent=1, default=str))
        write_markdown(data, args.out / "trust.md")
        print(f"trust: {args.out / 'trust.md'} rewritten with {len(args.fuzz_json or [])} fuzz parts and "
              f"{len(args.rerun_json or [])} reruns"
              + (f" and the sanitizers of {len(args.sanitizer_summary)} file(s)" if args.sanitizer_summary else ""))
        return 0
    quiet_third_party()
    if not torch.cuda.is_available():
        sys.exit("trust: needs a GPU")
    args.out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    data: dict = {"environment": environment(), "sections": args.sections}
    if "fuzz" in args.sections:
        if args.fuzz_json is None:
            args.fuzz_json = [args.out / "fuzz.json"]
            fuzz.main(["--cases", str(args.cases), "--seed", str(args.seed), "--max-elements",
                       str(args.max_elements), "--per-shape-cases", str(args.per_shape_cases), "--json",
                       str(args.fuzz_json[0])])
        data["fuzz"] = merge_fuzz([json.loads(path.read_text()) for path in args.fuzz_json])
        print(f"fuzz done in {time.perf_counter() - start:.0f} s", flush=True)
    for section, op in FUZZ_LOSSES.items():
        if section not in args.sections:
            continue
        path = args.out / f"{section}.json"
        fuzz.main(["--op", op, "--cases", str(args.cases), "--seed", str(args.seed), "--max-elements",
                   str(args.max_elements), "--per-shape-cases", str(args.per_shape_cases), "--json", str(path)])
        data[section] = merge_fuzz([json.loads(path.read_text())])
        print(f"{op} fuzz done at {time.perf_counter() - start:.0f} s", flush=True)
    runnable = [v for v in variants("softmax") if v.availability() is None]
    if "citizenship" in args.sections:
        data["compiled_backward"] = {"rows": fuzz.BACKWARD_ROWS, "row_lengths": fuzz.backward_row_lengths()}
        data["citizenship"] = {}
        for v in runnable:
            data["citizenship"][v.name] = citizenship(v)
            print(f"citizenship: {v.name} done at {time.perf_counter() - start:.0f} s", flush=True)
    if "bad_inputs" in args.sections:
        data["bad_inputs"] = {v.name: bad_inputs(v) for v in runnable}
    if set(ENTRIES) & set(args.sections):
        import lab.losses

        lab.losses._ops()  # the extension loaded, as the entries' first call loads it
    if "cross_entropy_entry" in args.sections:
        data["cross_entropy_entry"] = {}
        for vocab, options in ENTRY_CASES:
            label = ", ".join([f"V = {vocab}", *(f"{k} {v}" for k, v in options.items())])
            data["cross_entropy_entry"][f"lab.cross_entropy: {route_of(vocab, options)} ({label})"] = \
                cross_entropy_entry(vocab, options)
        print(f"lab.cross_entropy's citizenship done at {time.perf_counter() - start:.0f} s", flush=True)
    if "linear_cross_entropy_entry" in args.sections:
        data["linear_cross_entropy_entry"] = {head_entry_label(*case): linear_cross_entropy_entry(*case)
                                              for case in HEAD_ENTRY_CASES}
        print(f"lab.linear_cross_entropy's citizenship done at {time.perf_counter() - start:.0f} s", flush=True)
    if "large" in args.sections:
        data["large"] = large_tensors()
    if "sanitizers" in args.sections:
        data["sanitizers"] = sanitizers()
    data["seconds"] = round(time.perf_counter() - start)
    (args.out / "trust.json").write_text(json.dumps(data, indent=1, default=str))
    write_markdown(data, args.out / "trust.md")
    failed = [(n, c) for key in ("citizenship", "bad_inputs", *ENTRIES)
              for n, row in data.get(key, {}).items() for c, r in row.items() if r["result"] == FAIL]
    mismatches = sum(len(c["mismatches"]) for key in ("fuzz", *FUZZ_LOSSES)
                     for c in data.get(key, {}).get("variants", {}).values())
    san = data.get("sanitizers", {}).get("returncode", 0)
    large = data.get("large", {}).get("returncode", 0)
    print(f"trust ({', '.join(args.sections)}): {mismatches} fuzz mismatches, {len(failed)} failing cells, "
          f"sanitizers exit {san}, large tensors exit {large}; wrote {args.out}/trust.md")
    return 1 if mismatches or failed or san or large else 0


if __name__ == "__main__":
    sys.exit(main())
