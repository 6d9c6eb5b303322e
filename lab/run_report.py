"""A run's folder: results.json (with the environment), results.csv, results_wide.csv, report.md, the plots, and
the run's own dispatch table where it timed cuda.auto."""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from lab import bench, check, report, tabulate
from lab.console import log
from lab.operators import Operator
from lab.registry import Variant


def teaching_summary(op: Operator, results: list[report.Result]) -> list[str]:
    """Percent of each variant's own modeled ceiling at the three largest N of the operator's first
    GPU sweep."""
    lines = []
    sweep = op.gpu_sweeps[0]
    largest = sorted({r.n for r in results if r.sweep == sweep})[-3:]
    big = [r for r in results if r.sweep == sweep and r.n in largest and r.pct_modeled]
    for key in dict.fromkeys((r.variant, r.dtype) for r in big):
        pts = [r for r in big if (r.variant, r.dtype) == key]
        desc = ", ".join(f"N={r.n}: {r.gbps:.0f} GB/s = {r.pct_modeled:.0f}%" for r in pts)
        lines.append(f"  {key[0]:<20} {key[1]:<9} model {pts[0].model_reads:g}R+{pts[0].model_writes:g}W  {desc}")
    return lines


def save(op: Operator, results: list[report.Result], env: dict, out: Path, absent: list[tuple[Variant, str]],
         kernels: list, device: torch.device, args: argparse.Namespace) -> None:
    from lab import resources

    out.mkdir(parents=True, exist_ok=True)
    extra = {
        "command": args.command,
        "operator": op.name,
        "tolerances": check.describe_tolerances(op.tolerances),
        "unavailable": {v.name: reason for v, reason in absent},
        "cuda_resources": [k.as_dict() for k in kernels],
    }
    report.write_json(results, env, extra, out / "results.json")
    if any(r.variant == tabulate.AUTO and r.status == "ok" for r in results):
        source = f"{tabulate.run_name(out / 'results.json')} at commit {env['commit']}"
        tabulate.save(tabulate.build_table(results, env.get("gpu", "cpu"), source, env.get("compute_capability", "")),
                      out / tabulate.FILENAME)
    report.write_csv(results, out / "results.csv")
    report.write_wide_csv(results, out / "results_wide.csv")
    timing = bench.method(device, args.cudagraph, args.flush_mb, args.rounds)
    together = "in the same run" if args.cudagraph and device.type == "cuda" else "in the same rounds"
    if any(r.status == "ok" for r in results) and op.compute_bound:
        cells = (f"Each cell: the median time of a call; TFLOP/s = {op.bytes_formula} / median time; in parentheses, "
                 f"the time of the {op.ceiling_label} as a percent of the variant's, timed the same way {together}; "
                 "the peak memory one call allocated above its inputs (its outputs included). Timing: "
                 f"{timing}.")
    elif any(r.status == "ok" for r in results):
        cells = (f"GB/s = {op.bytes_formula} / median time. Timing: {timing}. In parentheses, percent of a copy of "
                 f"the same bytes (device-to-device on a GPU), timed the same way {together}.")
    else:
        cells = "Nothing was timed: each cell is the worst error of a checked point as a share of its tolerance."
    md = [f"# softmax-lab results: {op.name} on {env.get('gpu', 'CPU')}", "",
          f"{op.description}. Produced by `{extra['command']}` at commit `{env['commit']}` on {env['date']}.", "",
          f"{cells} `-`: skipped (see results.json for the reason); FAIL: failed the check, not timed.", "",
          "## Environment", "",
          "| key | value |", "|---|---|", *(f"| {k} | {v} |" for k, v in env.items()), ""]
    for (sweep, dtype), rs in report.grouped(results).items():
        header, rows = report.table_rows(rs, op.shape_label, report.metrics_for(op, args.metrics), op.ceiling_label)
        md += [f"## {sweep} sweep, {dtype}", "", report.markdown_table(header, rows), ""]
    for sweep, files in report.sweep_plots(results, op, out).items():
        names = {f.name for f in files}
        md += [f"![{sweep} sweep, {f.stem.removeprefix(sweep + '_')}]({f.name})" for f in files
               if op.compute_bound] + ([""] if op.compute_bound and files else [])
        if f"{sweep}.png" in names:
            md += [f"![{sweep} sweep]({sweep}.png)", ""]
        if f"{sweep}_entries.png" in names:
            md += ["The fast entries, the peers and PyTorch's one-pass variants alone, in percent of the copy:", "",
                   f"![{sweep} sweep, fast entries]({sweep}_entries.png)", ""]
    if bound := [r for r in results if r.host_bound]:
        md += ["## Host-bound timings", "",
               "At these points the variant's host time per call (back to back) came near the GPU time of the flush "
               "before each timed call, and timed again behind a longer flush it ran faster: the GPU "
               "waited for its launches and the median holds part of that wait. It is the speed a caller gets "
               "without CUDA graphs on this host, not the kernel's (`--flush-mb`, default "
               f"{bench.FLUSH_MB}, sets the flush).", "",
               "| sweep | dtype | shape | variant | median us | host us a call | flush us | behind a longer flush |",
               "|---|---|---|---|---|---|---|---|",
               *(f"| {r.sweep} | {r.dtype} | {r.shape_label} | {r.variant} | {r.median_ms * 1e3:.1f} | "
                 f"{r.host_us:.0f} | {r.flush_us:.0f} | {r.long_flush_ms * 1e3:.1f} us ({r.long_flush_mb} MB) |"
                 for r in bound), ""]
    if summary := teaching_summary(op, results):
        md += [f"## Percent of each variant's modeled ceiling ({op.gpu_sweeps[0]} sweep, largest N)", "",
               f"Modeled ceiling = copy GB/s x {summary_ratio(op)} / (reads + writes of the variant's traffic model). "
               "The model counts every read as an HBM read: above 100%, some of the re-reads it counts came from "
               "the L2 (rows of a few MiB stay there between sweeps).",
               "", "```", *summary, "```", ""]
    if kernels:
        md += [f"## CUDA kernels: resources (nvcc -Xptxas -v, {resources.ARCH})", "",
               "Per source, over its kernels (every kernel is in results.json, `cuda_resources`):", "",
               "| source | kernels | registers | most static smem bytes | spill bytes |", "|---|---|---|---|---|"]
        for source in dict.fromkeys(k.source for k in kernels):
            ks = [k for k in kernels if k.source == source]
            regs = sorted(k.registers for k in ks)
            md.append(f"| `{source}` | {len(ks)} | {regs[0]}-{regs[-1]} | {max(k.shared_bytes for k in ks)} | "
                      f"{sum(k.spill_store_bytes + k.spill_load_bytes for k in ks)} |")
        md.append("")
    (out / "report.md").write_text("\n".join(md))
    log(f"\nsaved {out}/: results.json, results.csv, results_wide.csv, report.md and plots")


def summary_ratio(op: Operator) -> str:
    return f"{op.min_traffic.reads + op.min_traffic.writes:g}"


