"""python -m lab.test (or softmax-lab): check every variant of an operator against float64, then benchmark the ones
that pass. The command line: the arguments, the run (lab/measure.py checks and times each point), the tables,
the run's folder (lab/run_report.py).

With a GPU: both sweeps (fixed: M*N = 64Mi elements; tutorial: M = 4096) in float32 and bfloat16, results saved
under results/<gpu>/<operator>/ (JSON, CSV, markdown report, plots). Without one: the torch variants on the
CPU and the Triton kernels under TRITON_INTERPRET=1 on small shapes, saved only with --out; CUDA variants are
listed as compiled but needing a GPU.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from pathlib import Path
from typing import NoReturn

import torch

HAS_GPU = torch.cuda.is_available()
if not HAS_GPU:
    # Before any Triton kernel is defined: the interpreter is chosen when @triton.jit runs.
    os.environ.setdefault("TRITON_INTERPRET", "1")

from lab import bench, dispatch, explain, inputs, measure, operators, report, run_report  # noqa: E402
from lab.console import log, progress_bar, rich_console, set_stream, wrap  # noqa: E402
from lab.env import clocks_under_load, environment, quiet_third_party, results_root  # noqa: E402
from lab.operators import Operator  # noqa: E402
from lab.registry import BACKENDS, Unavailable, Variant, dtype_name, variants  # noqa: E402

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
          "fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
OPERATORS = operators.operators()


def program() -> str:
    """How the user called the lab: the console script `softmax-lab`, or `python -m lab.test`."""
    return "softmax-lab" if Path(sys.argv[0]).name.startswith("softmax-lab") else "python -m lab.test"


def shape_argument(text: str) -> inputs.Shape:
    """inputs.Shape.parse for argparse, which shows only an ArgumentTypeError's own message."""
    try:
        return inputs.Shape.parse(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=program(), description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--op", default="softmax", choices=[*OPERATORS, "all"],
                   help="the operator (default softmax; all: every operator in turn)")
    p.add_argument("--only", "-v", "--variant", dest="variant", action="append", metavar="NAMES",
                   help="only these variants: names or globs, comma-separated or repeated, with or without the "
                        "backend ('cuda.*', 'fused', 'triton.fused,torch.softmax')")
    p.add_argument("--skip", action="append", metavar="NAMES", help="leave these variants out (as --only)")
    p.add_argument("-b", "--backend", action="append", choices=BACKENDS, help="only this backend (repeatable)")
    p.add_argument("-d", "--dtype", action="append", choices=sorted(DTYPES),
                   help="dtype (repeatable); default float32 and bfloat16")
    sweeps = sorted({s for op in OPERATORS.values() for s in op.sweeps})
    p.add_argument("-s", "--sweep", action="append", choices=sweeps,
                   help="sweep (repeatable); default the operator's GPU sweeps on a GPU (softmax: fixed and "
                        "tutorial), cpu without")
    p.add_argument("--shape", action="append", metavar="MxN[/STRIDE]", help="benchmark this shape (repeatable)")
    p.add_argument("--quick", action="store_true", help="a few shapes only (the quick sweep; cpu without a GPU)")
    p.add_argument("--check-only", action="store_true", help="check correctness, time nothing")
    p.add_argument("--list", action="store_true", help="list the variants and whether they can run here")
    p.add_argument("--explain", metavar="MxN", type=shape_argument,
                   help="say which variant lab.softmax (lab.auto) and torch.ops.lab.softmax (cuda.auto) run for "
                        "this shape, and why")
    p.add_argument("--gpu", metavar="MODEL",
                   help="with --explain: explain for this GPU model's committed table instead ('NVIDIA H200' or "
                        "its folder name, h200), on any machine, with or without a GPU")
    p.add_argument("--resources", action="store_true",
                   help="compile the CUDA sources for sm_90 and print registers, shared memory and spills")
    p.add_argument("--metrics", metavar="LIST",
                   help=f"what the tables show, comma-separated, of {', '.join(report.METRICS)} (default: the "
                        "operator's, gbps,pct_copy for those measured in GB/s; latency,tflops,pct_ceiling,memory for "
                        "those built on matmuls)")
    p.add_argument("--warmup", type=float, default=bench.WARMUP_MS, metavar="MS",
                   help=f"warm-up time per timed point in ms (default {bench.WARMUP_MS:g})")
    p.add_argument("--rep", type=float, default=bench.REP_MS, metavar="MS",
                   help=f"timed repetitions per point in ms (default {bench.REP_MS:g})")
    p.add_argument("--rounds", type=int, default=bench.ROUNDS, metavar="N",
                   help=f"a point's variants and the copy are timed in turn, N rounds over (default {bench.ROUNDS}); "
                        "--rep is shared among the rounds (with --cudagraph each one's replays are timed in one "
                        "stretch)")
    p.add_argument("--flush-mb", type=int, default=bench.FLUSH_MB, metavar="MB",
                   help=f"the L2 flush written before every timed call, in MB (default {bench.FLUSH_MB}, "
                        "triton.testing.do_bench's); a larger one hides more host time per call")
    p.add_argument("--cudagraph", action="store_true",
                   help="time by replaying a CUDA graph of the calls (no launch overhead; GPU only)")
    p.add_argument("--out", type=Path, help="where to save results: DIR/<operator>/ (default results/<gpu>/ on a GPU; "
                                            "without a GPU a run is saved only with --out)")
    p.add_argument("--no-save", action="store_true", help="print only")
    p.add_argument("--csv", nargs="?", const="-", metavar="FILE",
                   help="also write the results as CSV to FILE; `--csv` alone (or -) prints the tables as CSV")
    p.add_argument("--output-json", "--json", dest="json", type=Path, metavar="FILE",
                   help="also write the results as JSON to FILE")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if args.gpu is not None and not args.explain:
        p.error("--gpu goes with --explain MxN (it names the GPU model whose committed table is explained)")
    args.command = f"{program()} " + " ".join(sys.argv[1:] if argv is None else argv)
    try:
        args.shapes = [inputs.Shape.parse(s) for s in args.shape or []]
    except ValueError as e:
        p.error(str(e))
    args.metrics = [m.strip() for m in (args.metrics or "").split(",") if m.strip()] or None
    if unknown := [m for m in args.metrics or [] if m not in report.METRICS]:
        p.error(f"--metrics: unknown {', '.join(unknown)}; choose from {', '.join(report.METRICS)}")
    if args.cudagraph and not HAS_GPU:
        p.error("--cudagraph needs a GPU (it times the replay of a captured CUDA graph)")
    if args.warmup < 0 or args.rep <= 0:
        p.error("--warmup must be >= 0 and --rep > 0 (milliseconds)")
    if args.flush_mb < 1:
        p.error("--flush-mb must be at least 1 (MB)")
    if args.rounds < 1:
        p.error("--rounds must be at least 1")
    prepare_outputs(p, args)
    return args


def prepare_outputs(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Create the output folders before anything runs, so a bad path fails now, not after the run."""
    paths = [args.out] if args.out and not args.no_save else []
    paths += [f.parent for f in (args.json, Path(args.csv) if args.csv not in (None, "-") else None) if f]
    for folder in paths:
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            p.error(f"cannot create the output folder {folder}: {e.strerror}")


def usage_error(message: str) -> NoReturn:
    """A request the lab cannot serve as asked (no variant matches, no such sweep): said as argparse says a bad
    flag, on stderr with exit code 2, as is a selection of which nothing can run here."""
    print(f"{program()}: error: {message}", file=sys.stderr, flush=True)
    sys.exit(2)


def select(op: Operator, args: argparse.Namespace,
           device: torch.device) -> tuple[list[measure.Runnable], list[tuple[Variant, str]]]:
    """The selected variants that can run here, and those that cannot, each with its reason."""
    chosen = variants(op.name, patterns=args.variant, backends=args.backend, skip=args.skip)
    if not chosen:
        given = [f"{flag} {','.join(values)}" for flag, values in
                 (("--only", args.variant), ("--skip", args.skip), ("--backend", args.backend)) if values]
        usage_error(f"no {op.name} variant matches {' '.join(given)}; see --list")
    runnable, absent = [], []
    log(f"{op.name}: {op.description}; variants ({len(chosen)}):")
    for v in chosen:
        reason = v.unavailable_on(device)
        log(wrap(f"  {v.name:<22} " + (v.description if reason is None else f"not run: {reason}"), 26))
        if reason is None:
            runnable.append(measure.Runnable(v))
        else:
            absent.append((v, reason))
    return runnable, absent


def run_sweeps(op: Operator, runnable: list[measure.Runnable], plan: list[tuple[str, inputs.Shape]],
               dtypes: list[torch.dtype], device: torch.device, args: argparse.Namespace,
               results: list[report.Result]) -> None:
    """Check, then time, every point; each point's results are appended to `results` as soon as they
    exist (an interrupted run keeps them)."""
    total = len(plan) * len(dtypes)
    timing = bench.method(device, args.cudagraph, args.flush_mb, args.rounds)
    points = f"{total} shapes x {len(runnable)} variants = {total * len(runnable)} points"
    if args.check_only:
        log("\n" + wrap(f"checking (--check-only: nothing is timed): {points}; each cell is the worst error as a "
                         "share of the tolerance"))
    else:
        figure = "TFLOP/s" if op.compute_bound else "GB/s"
        log("\n" + wrap(f"checking, then timing ({timing}): {points}; {figure} = {op.bytes_formula} / time"))
    with progress_bar(total) as advance:
        sweep_points(op, runnable, plan, dtypes, device, args, results, total, advance)


def sweep_points(op: Operator, runnable: list[measure.Runnable], plan: list[tuple[str, inputs.Shape]],
                 dtypes: list[torch.dtype], device: torch.device, args: argparse.Namespace,
                 results: list[report.Result], total: int, advance) -> None:
    k = 0
    for dtype in dtypes:
        for sweep, shape in plan:
            k += 1
            start = time.perf_counter()
            case = op.make_inputs(shape, dtype, device, args.seed)
            point = measure.time_point(op, runnable, sweep, shape, case, op.reference(*case), device, args, results)
            base = next((p for p in point if p.variant == op.baseline and p.median_ms), None)
            for p in point:
                if base and p.median_ms:
                    p.speedup_vs_torch = base.median_ms / p.median_ms
            results += point
            del case
            cells = "  ".join(f"{p.variant}={report.cell(p, report.metrics_for(op, args.metrics))}" for p in point)
            took = time.perf_counter() - start
            log(wrap(f"[{k}/{total}] {sweep} {dtype_name(dtype)} {op.shape_label(shape)} ({took:.1f} s): {cells}"))
            advance(f"{sweep} {dtype_name(dtype)} {op.shape_label(shape)}")
            for p in point:
                if p.status == "failed":
                    log(f"    FAIL {p.variant}: {p.reason}")
                if p.host_bound:
                    log(f"    host-bound {p.variant}: {p.host_us:.0f} us of host time a call, the flush "
                        f"{p.flush_us:.0f} us of GPU time; {p.median_ms * 1e3:.1f} us a call, "
                        f"{p.long_flush_ms * 1e3:.1f} behind a {p.long_flush_mb} MB flush")


def out_dir(op: Operator, base: Path | None) -> Path | None:
    """Where an operator's results go: results/<gpu>/<operator>/, or <operator>/ below --out DIR. None: not saved
    (no GPU and no --out)."""
    if base is None:
        if not HAS_GPU:
            return None
        base = results_root() / dispatch.gpu_slug(torch.cuda.get_device_name(0))
    return base / op.name


def plan_for(op: Operator, args: argparse.Namespace) -> list[tuple[str, inputs.Shape]]:
    if args.shapes:
        return [("custom", s) for s in args.shapes]
    default = (["quick"] if args.quick else list(op.gpu_sweeps)) if HAS_GPU else ["cpu"]
    sweeps = args.sweep or default
    if missing := [s for s in sweeps if s not in op.sweeps]:
        usage_error(f"{op.name} has no sweep {', '.join(missing)}; its sweeps are {', '.join(op.sweeps)}")
    return [(s, shape) for s in sweeps for shape in op.sweeps[s]]


def run_operator(op: Operator, args: argparse.Namespace, device: torch.device, env: dict) -> int:
    """Select, check and time one operator's variants, print the tables and save them. Returns 0, 1 if a
    check failed, 2 if nothing can run here, 130 if interrupted (what was measured is still printed
    and saved)."""
    runnable, absent = select(op, args, device)
    if args.list:
        return 0
    if not runnable:
        log(wrap(f"{op.name}: none of the selected variants can run here: "
                 + "; ".join(f"{v.name}: {reason}" for v, reason in absent)))
        return 2
    dtypes = list(dict.fromkeys(DTYPES[d] for d in (args.dtype or ["float32", "bfloat16"])))
    plan = plan_for(op, args)
    out = None if args.no_save else out_dir(op, args.out)
    start = time.perf_counter()
    results: list[report.Result] = []
    interrupted = False
    try:
        measure.run_suite(op, runnable, dtypes, device, args.seed)
        run_sweeps(op, runnable, plan, dtypes, device, args, results)
    except KeyboardInterrupt:
        interrupted = True
        kept = "reported and saved" if out and results else "reported"
        measured = "1 point measured so far is" if len(results) == 1 else f"{len(results)} points measured so far are"
        log(f"\ninterrupted: the {measured} {kept}")
    if HAS_GPU:
        env.update(clocks_under_load())
    print_tables(op, results, report.metrics_for(op, args.metrics))
    if summary := run_report.teaching_summary(op, results):
        ratio = run_report.summary_ratio(op)
        log("\n" + wrap(f"percent of modeled ceiling (copy x {ratio} / (reads + writes); above 100%: the L2 served "
                        f"re-reads the model counts from HBM), {op.gpu_sweeps[0]} sweep, largest N:"))
        log("\n".join(summary))
    if bound := [r for r in results if r.host_bound]:
        log("\n" + wrap(f"host-bound: {len(bound)} timings held host time (faster behind a longer flush)"
                        f": {', '.join(f'{r.variant} {r.dtype} {r.shape_label}' for r in bound)}"))
    skipped = {(r.variant, r.reason) for r in results if r.status == "skipped"}
    if skipped:
        log("\n" + "\n".join(wrap(f"skipped {v}: {why}") for v, why in sorted(skipped)))
    not_timed: dict[str, dict[str, None]] = {}  # why -> the variants, in order, once each
    for r in results:
        if r.status == "checked" and r.reason:
            not_timed.setdefault(r.reason, {})[r.variant] = None
    for why, names in not_timed.items():
        log(wrap(f"not timed {', '.join(names)}: {why}"))
    for v, reason in absent:
        log(wrap(f"not run {v.name}: {reason}"))
    failed = sorted({(r.variant, r.dtype) for r in results if r.status == "failed"}
                    | {(r.variant.name, d) for r in runnable for d in r.failed})
    verdict = (f"FAILED: {', '.join(f'{v} ({d})' for v, d in failed)}" if failed
               else "no check failed before the interruption" if interrupted else "all checks passed")
    log(f"\n{op.name}: {len(results)} points in {time.perf_counter() - start:.0f} s"
        + ("; INTERRUPTED" if interrupted else "") + f"; {verdict}")
    ALL_RESULTS.extend(results)
    if out and results:
        # The kernels' registers and spills belong with a run that ran them; --resources gives them anywhere.
        ran_cuda = device.type == "cuda" and any(r.variant.backend == "cuda" for r in runnable)
        run_report.save(op, results, env, out, absent, resource_report() if ran_cuda else [], device, args)
    elif results and not args.no_save:
        log("not saved: a run without a GPU is saved only where --out DIR names a folder")
    return 130 if interrupted else 1 if failed else 0


def print_tables(op: Operator, results: list[report.Result], metrics: list[str]) -> None:
    console = rich_console()
    for (sweep, dtype), rs in report.grouped(results).items():
        header, rows = report.table_rows(rs, op.shape_label, metrics, op.ceiling_label)
        timed = any(r.status == "ok" for r in rs)
        shown = ", ".join(metrics) if timed else "checked, not timed: worst error / tolerance"
        title = f"{op.name}, {sweep} sweep, {dtype}: {shown}; '-' skipped (reason below), FAIL failed"
        if console is not None:
            log()
            console.print(report.rich_table(header, rows, title))
        else:
            log(f"\n{title} the check")
            log(report.text_table(header, rows))


def resource_report() -> list:
    """The CUDA sources' resource report for the saved results (compiles every source: announced)."""
    from lab import resources

    if not resources.find_nvcc():
        return []
    log(f"compiling the {len(resources.cuda_sources())} CUDA sources for the resource report (nvcc, up to a minute)...")
    try:
        return resources.report_all()
    except resources.CompileError as e:
        log(f"resources: {e}")
        return []
    except KeyboardInterrupt:  # the run's results are measured: an interruption here must not lose them
        log("interrupted: the results are saved without the resource report (python -m lab.test --resources gives it)")
        return []


ALL_RESULTS: list[report.Result] = []  # every operator's results of this run, for --json and --csv


def print_resources() -> list:
    from lab import resources

    try:
        ks = resources.report_all()
    except resources.CompileError as e:
        log(f"resources: {e}")
        return []
    log(f"{'kernel':<96} regs  smem  stack  spills")
    for k in ks:
        log(f"{resources.short_name(k.kernel)[:96]:<96} {k.registers:>4} {k.shared_bytes:>5} {k.stack_bytes:>6} "
            f"{k.spill_store_bytes + k.spill_load_bytes:>7}")
    log(f"{len(ks)} kernels, {sum(k.spills for k in ks)} spilling")
    return ks


def explain_command(shape: inputs.Shape, dtype_names: list[str] | None, gpu: str | None = None) -> int:
    from lab.backends.cuda_variants import load_extension

    try:
        load_extension()
    except Unavailable as e:
        log(f"--explain needs the extension: {e}")
        return 1
    if gpu is not None:
        models = dispatch.committed_models()
        named = [m for m in models if gpu.lower() in (m.lower(), dispatch.gpu_slug(m))]
        if not named:
            usage_error(f"--gpu {gpu!r}: no committed table for that model; the models with one: "
                        + ", ".join(f"{m!r} ({dispatch.gpu_slug(m)})" for m in sorted(models)))
        gpu = named[0]
        here = torch.cuda.get_device_name(0) if HAS_GPU else "no GPU"
        where = f"{gpu}, by its committed table (explained here, on {here})"
    else:
        where = torch.cuda.get_device_name(0) if HAS_GPU else (
            "no GPU here (the table is per GPU model; --gpu MODEL explains a model's committed table)")
    log(f"torch.ops.lab.softmax (cuda.auto) on {where}")
    for dtype in dict.fromkeys(DTYPES[d] for d in (dtype_names or ["float32", "bfloat16"])):
        log("\n".join(explain.explain(shape.m, shape.n, dtype, gpu)))
    return 0


@contextlib.contextmanager
def flags_hidden_from_libraries():
    """sys.argv without the lab's flags while the variants run: a library that parses the command line
    itself would take them for its own (QuACK's CuTe DSL parses sys.argv at every compile for its
    `-diagnostic` flag, which `-d float32` abbreviates: the run failed with "invalid choice")."""
    saved = sys.argv
    sys.argv = saved[:1]
    try:
        yield
    finally:
        sys.argv = saved


def main(argv: list[str] | None = None) -> int:
    """The command line; a reader that stops reading (`softmax-lab --list | head`) ends the run quietly."""
    try:
        return run_command(argv)
    except BrokenPipeError:
        # Python would report the pipe again when it flushes stdout at exit: point stdout at nothing first.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


def run_command(argv: list[str] | None) -> int:
    quiet_third_party()
    args = parse_args(argv)
    # `--csv` alone: stdout carries the CSV only (`> results.csv`), the report goes to stderr.
    set_stream(sys.stderr if args.csv == "-" else sys.stdout)
    if args.resources:
        log("compiling every CUDA source for sm_90 with nvcc -Xptxas -v (up to a minute)...")
        ks = print_resources()
        return 1 if not ks or any(k.spills for k in ks) else 0
    if args.explain:
        return explain_command(args.explain, args.dtype, args.gpu)
    device = torch.device("cuda" if HAS_GPU else "cpu")
    if not HAS_GPU:
        # One thread: the CPU timings of small tensors are otherwise dominated by thread wake-ups.
        torch.set_num_threads(1)
    env = environment()
    log(f"softmax-lab on {env.get('gpu', 'CPU (no GPU: torch on CPU, Triton interpreted)')}: torch {env['torch']}, "
        f"triton {env['triton']}, commit {env['commit'][:12]}")
    ops = list(OPERATORS.values()) if args.op == "all" else [OPERATORS[args.op]]
    ALL_RESULTS.clear()
    status = 0
    with flags_hidden_from_libraries():
        for op in ops:
            status |= run_operator(op, args, device, env)
    if args.json:
        report.write_json(ALL_RESULTS, env, {}, args.json)
        log(f"wrote {args.json}")
    if args.csv == "-":
        print(report.csv_text(ALL_RESULTS), end="")
    elif args.csv:
        report.write_csv(ALL_RESULTS, Path(args.csv))
        log(f"wrote {args.csv}")
    return status


if __name__ == "__main__":
    sys.exit(main())
