"""Randomized differential testing of the softmax variants against float64 torch.softmax (and, with --op
cross_entropy or cross_entropy_loss, of the cross-entropy variants against their float64 reference).

    python -m lab.fuzz [--op cross_entropy] [--cases 10000] [--seed 0] [--only NAMES] [--skip NAMES] [--max-elements E]
    python -m lab.fuzz --seed S --case K --only NAME      # one case again: what a failure prints

Each case is drawn from a seeded generator: M from 0 to large (within --max-elements), N from 1 to
2^20 (small numbers, primes, powers of two and their neighbours, both sides of every threshold the
variants' own launch tables declare, and random lengths), float32, float16 or bfloat16, row strides
larger than N, views whose first element is not 16-byte aligned, and values of one of several
kinds: normal, wide uniform, per-row outliers, causal-mask -inf tails, fully -inf rows, +inf, NaN,
huge magnitudes, all-equal rows, tiny magnitudes. Every variant that can take a case runs it into a
NaN-poisoned output and is compared with the reference as the lab checks (lab/check.py); every
tenth float32 case also compares the gradient through the variant with float64's (a variant that records
no gradient fails it). A mismatch prints the one-line command that reproduces it.
cross_entropy's cases are the same logits (but for "huge" ones: magnitudes near the dtype's largest overflow any
float32 loss, PyTorch's too), with targets drawn from the vocabulary (one row in eight ignored) and options drawn
from the operator's (the defaults in most cases, else a reduction, label smoothing, z-loss, soft-capping, class
weights, another ignore_index, or several); a variant that lacks a case's options skips it (case_reason).
cross_entropy_loss's cases are cross_entropy's, the loss alone checked.
linear_cross_entropy's (and linear_cross_entropy_loss's) cases draw the hidden states as the logits above (M x K, the
row length K at most HEAD_MAX_HIDDEN; normal, outlying, equal, tiny values or NaN), a vocabulary beside them, a
classifier, a bias in a third of the cases, targets and cross_entropy's options but class weights (head_inputs).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from lab import check, operators
from lab.env import git_commit, quiet_third_party
from lab.inputs import Shape, irregular, make_input
from lab.registry import Unavailable, Variant, dtype_name, variants

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
HEADS = ("linear_cross_entropy", "linear_cross_entropy_loss")  # drawn hidden states, classifier, targets, options
LOSSES = ("cross_entropy", "cross_entropy_loss", *HEADS)  # drawn logits (heads: hidden states), targets and options
OPERATORS = ("softmax", *LOSSES)
PER_SHAPE_CASES = 200  # a variant built afresh for every shape (an Inductor compile per case) takes the first ones
KINDS = ("normal", "wide uniform", "outliers", "causal -inf tail", "all -inf rows", "+inf", "NaN", "huge",
         "all equal", "tiny")
PRIMES = (2, 3, 5, 7, 13, 31, 61, 127, 251, 509, 1021, 2039, 4093, 8191, 16381, 32749, 65521, 131071, 262139,
          524287, 1048573)
MAX_N = 2**20 + 1
DEFAULT_MAX_ELEMENTS = 2**24


@dataclass(frozen=True)
class Case:
    seed: int
    index: int
    m: int
    n: int
    stride: int  # elements between row starts (>= n)
    offset: int  # elements before the first row: a view that starts mid-pack when not a multiple of 8
    dtype: str
    kind: str

    def describe(self) -> str:
        extra = (f"/{self.stride}" if self.stride != self.n else "") + (f" +{self.offset}" if self.offset else "")
        return f"case {self.index}: {self.m}x{self.n}{extra} {self.dtype} {self.kind}"


def lengths(thresholds: list[int], max_n: int) -> list[int]:
    """The row lengths cases are drawn from (besides random ones)."""
    special = set(range(1, 9)) | set(PRIMES)
    for k in range(21):
        special |= {2**k - 1, 2**k, 2**k + 1}
    for t in thresholds:
        special |= {t - 1, t, t + 1}
    return sorted(n for n in special if 1 <= n <= max_n)


def variant_thresholds(vs: list[Variant]) -> list[int]:
    """Row lengths where a variant's launch changes, as its own tables declare them."""
    out: set[int] = set()
    for v in vs:
        if v.max_n:
            out.add(v.max_n)
        if v.thresholds is not None:
            for dtype in DTYPES:
                out |= set(v.thresholds(dtype))
    return sorted(out)


def draw(seed: int, index: int, ns: list[int], max_elements: int, max_n: int, kinds: tuple[str, ...] = KINDS) -> Case:
    rng = random.Random(seed * 1_000_003 + index)
    n = rng.choice(ns) if rng.random() < 0.7 else rng.randint(1, max_n)
    n = min(n, max_n)
    budget = max(1, max_elements // n)
    m = rng.choice([0, 1, 2, 3, rng.randint(1, min(64, budget)), rng.randint(1, budget)])
    m = min(m, budget)
    stride = n if rng.random() < 0.7 else n + rng.choice([1, 3, 8, rng.randint(1, 64)])
    offset = 0 if rng.random() < 0.75 else rng.choice([1, 2, 3, 5, 7])
    return Case(seed, index, m, n, stride, offset, dtype_name(rng.choice(DTYPES)), rng.choice(kinds))


def make(case: Case, device: torch.device | str) -> torch.Tensor:
    """The case's input: a view of a NaN-padded buffer (reading past a row poisons the result)."""
    dtype = getattr(torch, case.dtype)
    g = torch.Generator(device="cpu").manual_seed(case.seed * 1_000_003 + case.index)
    m, n = case.m, case.n
    x = irregular(m, n, g, "cpu") if m else torch.empty(0, n)
    if case.kind == "wide uniform":
        x = (torch.rand(m, n, generator=g) - 0.5) * 2000
    elif case.kind == "causal -inf tail" and n > 1:
        keep = torch.randint(1, n + 1, (m, 1), generator=g)
        x = x.masked_fill(torch.arange(n) >= keep, -math.inf)
    elif case.kind == "all -inf rows" and m:
        x[torch.rand(m, generator=g) < 0.5] = -math.inf
    elif case.kind == "+inf" and m:
        x[torch.arange(m), torch.randint(0, n, (m,), generator=g)] = math.inf
    elif case.kind == "NaN" and m:
        rows = torch.rand(m, generator=g) < 0.5
        x[rows, torch.randint(0, n, (int(rows.sum()),), generator=g)] = math.nan
    elif case.kind == "huge":
        x = x.sign() * torch.finfo(dtype).max * (0.5 + 0.5 * torch.rand(m, n, generator=g))
    elif case.kind == "all equal":
        x = torch.full((m, n), 3.25) if m else x
    elif case.kind == "tiny":
        x = x * torch.finfo(dtype).tiny
    # The buffer is made on the device and the view taken there: moving a strided view with .to(device)
    # would give the kernels a contiguous copy, and the strides and misaligned starts would never reach them.
    buf = torch.full((case.offset + max(m, 1) * case.stride,), math.nan, dtype=dtype, device=device)
    view = buf[case.offset:case.offset + m * case.stride].view(m, case.stride)[:, :n] if m else \
        buf[case.offset:case.offset].view(0, n)
    view.copy_(x.to(dtype))
    return view


def cross_entropy_inputs(case: Case, logits: torch.Tensor) -> tuple:
    """cross_entropy's inputs for a case: its logits, targets and options, drawn from the case's seed."""
    from lab.operators.cross_entropy import CrossEntropyOptions

    rng = random.Random(case.seed * 1_000_003 + case.index + 1)
    g = torch.Generator(device="cpu").manual_seed(case.seed * 1_000_003 + case.index + 1)
    options = rng.choice([{}, {}, {}, dict(reduction="sum"), dict(reduction="none"), dict(label_smoothing=0.1),
                          dict(z_loss=1e-4), dict(softcap=30.0), dict(weight=True), dict(ignore_index=0),
                          dict(reduction="none", label_smoothing=0.05, z_loss=1e-4, softcap=15.0, weight=True)])
    if options.pop("weight", False):
        options["weight"] = torch.rand(case.n, generator=g).add(0.25).to(logits.device)
    options = CrossEntropyOptions(**options)
    target = torch.randint(0, case.n, (case.m,), generator=g)
    target[torch.rand(case.m, generator=g) < 0.125] = options.ignore_index
    return logits, target.to(logits.device), options


CROSS_ENTROPY_KINDS = tuple(k for k in KINDS if k != "huge")
HEAD_KINDS = ("normal", "outliers", "all equal", "tiny", "NaN")
"""A head's hidden states: the values whose logits every dtype holds (infinities in a matmul's operands make NaN and
infinite logits whose mix no variant is asked to match beyond the special cases' NaN token)."""
HEAD_VOCABULARIES = (1, 2, 3, 7, 31, 64, 257, 1000, 4099, 16385, 50257)
HEAD_MAX_HIDDEN = 8192  # a head's hidden size (the case's row length) at most: its vocabulary is drawn beside it


def head_vocabulary(case: Case, max_elements: int) -> int:
    """A head case's vocabulary: drawn from the case's seed among HEAD_VOCABULARIES whose logits (M x V) and
    classifier (V x K, K = the case's row length) stay within max_elements."""
    fits = [v for v in HEAD_VOCABULARIES if v * max(case.m, 1) <= max_elements and v * case.n <= max_elements]
    return random.Random(case.seed * 1_000_003 + case.index + 2).choice(fits or [1])


def head_inputs(case: Case, x: torch.Tensor, max_elements: int) -> tuple:
    """linear_cross_entropy's inputs for a case: its hidden states (make(case): M x K, strided and misaligned views
    included), a classifier W ~ N(0, 2 / K) of the drawn vocabulary, a bias in a third of the cases, targets (one row
    in eight ignored) and options (cross_entropy's but class weights), drawn from the case's seed."""
    from lab.operators.cross_entropy import CrossEntropyOptions

    rng = random.Random(case.seed * 1_000_003 + case.index + 1)
    g = torch.Generator(device="cpu").manual_seed(case.seed * 1_000_003 + case.index + 1)
    vocab, k = head_vocabulary(case, max_elements), case.n
    options = CrossEntropyOptions(**rng.choice([
        {}, {}, {}, dict(reduction="sum"), dict(reduction="none"), dict(label_smoothing=0.1), dict(z_loss=1e-4),
        dict(softcap=30.0), dict(ignore_index=0), dict(reduction="none", label_smoothing=0.05, z_loss=1e-4,
                                                        softcap=15.0)]))
    weight = (torch.randn(vocab, k, generator=g) * (2.0 / k) ** 0.5).to(x.dtype).to(x.device)
    bias = torch.randn(vocab, generator=g).to(x.dtype).to(x.device) if rng.random() < 1 / 3 else None
    target = torch.randint(0, vocab, (case.m,), generator=g)
    target[torch.rand(case.m, generator=g) < 0.125] = options.ignore_index
    return x, weight, target.to(x.device), bias, options


def case_kinds(op: str) -> tuple[str, ...]:
    """The kinds of values an operator's cases draw: a head's hidden states, cross-entropy's logits, softmax's rows."""
    return HEAD_KINDS if op in HEADS else CROSS_ENTROPY_KINDS if op in LOSSES else KINDS


def loss_inputs(op: str, case: Case, x: torch.Tensor, max_elements: int) -> tuple:
    """A loss operator's inputs for a case from its drawn tensor x (make(case)): head_inputs for a head,
    cross_entropy_inputs for cross-entropy's logits."""
    return head_inputs(case, x, max_elements) if op in HEADS else cross_entropy_inputs(case, x)


def case_shape(case: Case, op: str = "softmax", max_elements: int = DEFAULT_MAX_ELEMENTS) -> Shape:
    """The Shape of make(case) (a head's: M tokens, the drawn vocabulary, K = the row length), without making it."""
    if op in HEADS:
        return Shape(case.m, head_vocabulary(case, max_elements), None, case.n)
    return Shape(case.m, case.n, None if case.m == 0 or case.stride == case.n else case.stride)


def run_case(v: Variant, case: Case, x: torch.Tensor | tuple, ref, op) -> str | None:
    """None if the variant matches the reference on this case (and its gradient, where checked: softmax's)."""
    res = check.check(v.kernel(), x, v.writes_out, ref, op=op)
    if not res.ok:
        return res.summary()
    if op.name != "softmax":
        return None
    if case.index % 10 == 0 and case.dtype == "float32" and case.m and math.isfinite(x.float().abs().sum()):
        return gradient_mismatch(v.kernel(), x, seed=case.seed * 1_000_003 + case.index)
    return None


def gradient_mismatch(forward, x: torch.Tensor, seed: int) -> str | None:
    """The gradient of forward(x) (a variant's kernel, or a compiled function of it) for an upstream dy
    drawn from `seed` (so a failure's command redraws it), against float64; None where it agrees."""
    xg = x.detach().clone().requires_grad_()
    try:
        y = forward(xg)
    except RuntimeError as e:
        return f"FAIL (gradient): the forward on a tensor that requires grad raised: {e}".splitlines()[0]
    if y.grad_fn is None:
        return "FAIL (gradient): no gradient recorded on a tensor that requires grad"
    g = torch.Generator(device="cpu").manual_seed(seed)
    dy = torch.randn(y.shape, dtype=y.dtype, generator=g).to(y.device)
    y.backward(dy)
    backward = operators.get("softmax_backward")
    # A softmax's backward works on its forward's output y as the variant returned it (the forward's own
    # error is checked against float64 before this): the exact gradient of that y is the reference. From
    # the float64 y, or from it rounded to the dtype, a subnormal y_i that the forward's tolerance allows a
    # few units in the last place off (atol scales with the row's largest y) carries that relative error
    # into dx_i, and torch.softmax fails too (case 31490, float32 219327x4: 1.3x the tolerance).
    y_held = y.detach().double()
    res = check.compare(xg.grad, backward.reference(y_held, dy), x.dtype, None,
                        backward.tolerances_for(x.device), backward.error_scale(y_held, dy))
    return None if res.ok else "FAIL (gradient): " + res.summary()


BACKWARD_ROWS = 3  # rows per compiled-backward case: compile time, not the kernel's, is what such a case costs


def backward_row_lengths() -> list[int]:
    """Row lengths on both sides of every threshold where the lab's softmax backward changes kernel: those of
    the CUDA ops' choice (backward_choice) and the Triton backward's fused limit."""
    from lab import ops
    from lab.registry import get

    limits = {ops.BACKWARD_SHORT_ROWS, ops.BACKWARD_TRITON_MAX_N,
              get("softmax_backward", "triton.fused").max_n}
    return sorted({n + side for n in limits for side in (0, 1)})


def backward_cases(v: Variant) -> list[tuple[torch.dtype, int]]:
    """(dtype, N) of every backward_row_lengths() in each dtype the variant takes, where it takes that row length."""
    return [(dtype, n) for dtype in v.dtypes for n in backward_row_lengths()
            if v.skip_reason(Shape(BACKWARD_ROWS, n), dtype) is None]


def compiled_backward_mismatches(v: Variant, cases: list[tuple[torch.dtype, int]], seed: int = 0) -> list[str]:
    """torch.compile(fullgraph=True) of a softmax variant's kernel, forward and backward, at each (dtype, N) of
    `cases` (backward_cases), each case compiled afresh (so none falls back to eager at the recompile limit):
    the gradient against float64 (gradient_mismatch). The cases that failed, each with its problem; an error
    (a graph break, a kernel the compiler cannot trace) is a failure too."""
    kernel = v.kernel()
    failures = []
    for dtype, n in cases:
        x = make_input(Shape(BACKWARD_ROWS, n), dtype, "cuda", seed + n)
        torch._dynamo.reset()
        compiled = torch.compile(lambda t: kernel(t), fullgraph=True, dynamic=False)
        try:
            problem = gradient_mismatch(compiled, x, seed + n)
        except Exception as e:  # the finding is the failure itself
            problem = f"{type(e).__name__}: {e}".splitlines()[0][:200]
        if problem:
            failures.append(f"{dtype_name(dtype)} {BACKWARD_ROWS}x{n}: {problem}")
    torch._dynamo.reset()
    return failures


def cases(seed: int, count: int, ns: list[int], max_elements: int, max_n: int,
          only: int | None = None, start: int = 0, kinds: tuple[str, ...] = KINDS) -> Iterator[Case]:
    indices = [only] if only is not None else range(start, start + count)
    for i in indices:
        yield draw(seed, i, ns, max_elements, max_n, kinds)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m lab.fuzz", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--op", choices=OPERATORS, default="softmax", help="the operator whose variants run")
    p.add_argument("--cases", type=int, default=1000, help="cases per run (default 1000)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--start", type=int, default=0, metavar="K",
                   help="run cases K .. K + cases - 1 (a long run split over several calls; default 0)")
    p.add_argument("--case", type=int, help="run only this case (a failure's reproduction)")
    p.add_argument("--only", "-v", action="append", metavar="NAMES", help="variants (as python -m lab.test)")
    p.add_argument("--skip", action="append", metavar="NAMES")
    p.add_argument("--max-elements", type=int, default=DEFAULT_MAX_ELEMENTS,
                   help="M * N at most per case (default 2^24)")
    p.add_argument("--max-n", type=int, default=MAX_N, help=f"the longest row (default {MAX_N})")
    p.add_argument("--per-shape-cases", type=int, default=PER_SHAPE_CASES, metavar="K",
                   help="variants built afresh for every shape (torch.compile: an Inductor compile per case) "
                        f"take the first K cases only (default {PER_SHAPE_CASES}); the table shows how many each ran")
    p.add_argument("--json", type=Path, help="write the counts and mismatches here")
    args = p.parse_args(argv)
    quiet_third_party()
    if args.op in HEADS:
        args.max_n = min(args.max_n, HEAD_MAX_HIDDEN)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    op = operators.get(args.op)
    chosen = variants(args.op, patterns=args.only, skip=args.skip)
    runnable = []
    for v in chosen:
        reason = v.unavailable_on(device)
        if reason:
            print(f"not run {v.name}: {reason}")
        else:
            runnable.append(v)
    if not runnable:
        print("no variant can run here")
        return 2
    ns = lengths(variant_thresholds(runnable), args.max_n)
    counts = {v.name: {"cases": 0, "skipped": 0, "not drawn": 0, "mismatches": []} for v in runnable}
    # A case is drawn from the seed, its index, and the limits: a repro names the limits that are not the defaults.
    drawn_as = (f" --max-elements {args.max_elements}" if args.max_elements != DEFAULT_MAX_ELEMENTS else "") + \
        (f" --max-n {args.max_n}" if args.max_n != MAX_N else "") + (f" --op {args.op}" if args.op != "softmax" else "")

    commit = git_commit()  # the code the cases ran (LAB_COMMIT where the checkout's .git is not the code's)

    def save(done: int) -> None:
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps({"op": args.op, "seed": args.seed, "start": args.start, "cases": done,
                                             "asked": args.cases, "commit": commit,
                                             "device": str(device), "per_shape_cases": args.per_shape_cases,
                                             "max_elements": args.max_elements, "variants": counts}, indent=1))

    start = time.perf_counter()
    kinds = case_kinds(args.op)

    def tally() -> dict[str, tuple[int, int, int, int]]:
        return {name: (c["cases"], c["skipped"], c["not drawn"], len(c["mismatches"])) for name, c in counts.items()}

    finished = (0, tally())  # the cases done and the counts after them, set in one step after each case
    stopped = False
    try:
        for k, case in enumerate(cases(args.seed, args.cases, ns, args.max_elements, args.max_n, args.case,
                                       args.start, kinds)):
            # Which variants take the case is known before its input is made: a case none of them takes (a run
            # --only the variants limited to some shapes) costs no input and no reference.
            shape = case_shape(case, args.op, args.max_elements)
            takers = []
            for v in runnable:
                c = counts[v.name]
                if v.per_shape and k >= args.per_shape_cases:
                    c["not drawn"] += 1
                elif v.skip_reason(shape, dtype := getattr(torch, case.dtype), case.offset * dtype.itemsize):
                    c["skipped"] += 1
                else:
                    takers.append(v)
            x = make(case, device) if takers else None
            assert x is None or Shape.of(x) == case_shape(case), (Shape.of(x), case_shape(case))
            if x is not None and op.name in LOSSES:
                x = loss_inputs(op.name, case, x, args.max_elements)
                for v in [v for v in takers if v.case_skip_reason(*x)]:
                    takers.remove(v)
                    counts[v.name]["skipped"] += 1
            ref = op.reference(*(x if isinstance(x, tuple) else (x,))) if takers else None
            for v in takers:
                c = counts[v.name]
                try:
                    problem = run_case(v, case, x, ref, op)
                except Unavailable as e:
                    problem = f"unavailable: {e}"
                c["cases"] += 1
                if problem:
                    repro = f"python -m lab.fuzz --seed {case.seed} --case {case.index} --only {v.name}{drawn_as}"
                    c["mismatches"].append({"case": asdict(case), "problem": problem, "repro": repro})
                    print(f"MISMATCH {v.name} {case.describe()}: {problem}\n    reproduce: {repro}", flush=True)
            finished = (k + 1, tally())
            if (k + 1) % 500 == 0:
                print(f"{k + 1} cases in {time.perf_counter() - start:.0f} s", flush=True)
                save(k + 1)  # a run cut short keeps what it did
    except KeyboardInterrupt:  # stopped (timeout -s INT): the case under way is not counted, the finished ones kept
        stopped = True
        for name, (ran, skipped, not_drawn, found) in finished[1].items():
            c = counts[name]
            c["cases"], c["skipped"], c["not drawn"] = ran, skipped, not_drawn
            del c["mismatches"][found:]
        print(f"\nstopped after {finished[0]} of {args.cases} cases: the counts below and --json are of those",
              flush=True)
    print(f"\n{'variant':<24} {'cases':>7} {'skipped':>8} {'not drawn':>10} {'mismatches':>11}")
    for name, c in counts.items():
        print(f"{name:<24} {c['cases']:>7} {c['skipped']:>8} {c['not drawn']:>10} {len(c['mismatches']):>11}")
    save(finished[0])
    return 1 if any(c["mismatches"] for c in counts.values()) else 130 if stopped else 0


if __name__ == "__main__":
    sys.exit(main())
