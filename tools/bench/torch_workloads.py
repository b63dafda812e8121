#!/usr/bin/env python3
"""Real PyTorch workloads under three allocators: peak memory, step time, losses.

    python3 tools/bench/torch_workloads.py [--workloads a,b,c] [--modes native,expandable,cudalloc]
        [--steps N] [--json PATH] [--conf STR] [--repeat R] [--limit-fraction F]
        [--deterministic] [--child-timeout S] [--dry-run]

Every (workload, mode) runs in a fresh subprocess, because PyTorch's allocator can be chosen
only once per process, before CUDA is used. The modes:
  native      PyTorch's caching allocator (PYTORCH_CUDA_ALLOC_CONF unset);
  expandable  PyTorch's allocator with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True;
  cudalloc    cudalloc.enable() first thing in the child, before torch touches CUDA;
              CUDALLOC_CONF comes from --conf, else from the environment.
PYTORCH_CUDA_ALLOC_CONF is removed for native and cudalloc.

Workloads (defined in workloads.py) are those of shared/traces/record_traces.py (the reference
traces): same models, configurations, batch sizes and seeds, run for more steps where that is
cheap. Main ones
(the default): gpt2_train, llama_train_varlen, resnet50_train, vit_train, gpt2_generate;
extra ones, by name: bert_infer_varlen, maskrcnn_train, moe_train, t5_train, gpt2_infer_varlen,
gnn_train_varlen (torch_geometric; graph sizes change at every step).

Per run: peak reserved and peak allocated bytes (native / expandable: torch.cuda.max_memory_*;
cudalloc: stats()["reserved_bytes"|"allocated_bytes"]["peak"]), the time of each step between
two torch.cuda.synchronize() calls (the first 2 steps are warm-up, left out of the median),
each step's loss (inference: a checksum of the outputs) to compare with native, and for
cudalloc the per-step deltas of page_maps, page_unmaps, page_waits, device_allocs and (host
tier, offload:host) spills, page_offloads, page_prefetches.

--repeat R runs native and cudalloc R times, interleaved (expandable once), to show machine
noise. --limit-fraction F gives cudalloc limit = F x the workload's native peak reserved from
the same invocation (native must be among the modes); an out-of-memory is reported as OOM.
--deterministic turns on deterministic kernels (without it, atomics make losses differ
slightly from run to run, also native against native). --dry-run prints the child commands.

Output: a Markdown table on stdout, and with --json everything measured (rewritten after each
child, so a killed run keeps what it finished). Exit status: 0 every run finished (OOM under
--limit-fraction counts as finished), 1 a run failed, 77 torch is missing or nothing ran.
The library comes from $CUDALLOC_LIBRARY or the usual places (see cudalloc.__init__).
"""
import argparse
import importlib.util
import json
import math
import os
import shlex
import statistics
import sys
import time
import traceback

from child import (DETERMINISTIC_ENV, SKIP, child_env, describe, import_cudalloc,
                   make_deterministic, print_result, run_child as run_script, script_command)
from workloads import MAIN_WORKLOADS, WORKLOADS

WARMUP = 2
MODES = ["native", "expandable", "cudalloc"]
EXPANDABLE_CONF = "expandable_segments:True"
CUDALLOC_COUNTERS = ["page_maps", "page_unmaps", "page_waits", "device_allocs",
                     "device_frees", "alloc_retries", "ooms", "spills", "page_offloads",
                     "page_prefetches"]
TORCH_COUNTERS = ["num_device_alloc", "num_device_free", "num_alloc_retries", "num_ooms"]
GIB = float(1 << 30)


# ---- Child side -----------------------------------------------------------------------

def _counter_reader(torch, cudalloc):
    """A function returning the cumulative event counters of this mode."""
    if cudalloc is not None:
        def read():
            s = cudalloc.stats()
            return {n: s.get(n, {}).get("total", 0) for n in CUDALLOC_COUNTERS}
    else:
        def read():
            s = torch.cuda.memory_stats()
            return {n: s.get(n, 0) for n in TORCH_COUNTERS}
    return read


def _peaks(torch, cudalloc):
    if cudalloc is None:
        return {"peak_reserved": torch.cuda.max_memory_reserved(),
                "peak_allocated": torch.cuda.max_memory_allocated()}
    s = cudalloc.stats()
    peak = lambda name: s.get(name, {}).get("peak", 0)
    return {"peak_reserved": peak("reserved_bytes"), "peak_allocated": peak("allocated_bytes"),
            "peak_requested": peak("requested_bytes"), "peak_mapped": peak("mapped_bytes")}


def _is_oom(torch, e):
    oom_type = getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError
    return isinstance(e, oom_type) or "out of memory" in str(e).lower()


def _run_steps(torch, step, steps, read_counters, result):
    """Runs and times the steps, filling result; an exception ends the loop and is recorded."""
    before = read_counters()
    for i in range(steps):
        torch.cuda.synchronize()
        start = time.perf_counter()
        try:
            value = step(i)
            torch.cuda.synchronize()
        except Exception as e:
            result["status"] = "oom" if _is_oom(torch, e) else "error"
            result["message"] = f"step {i}: {type(e).__name__}: {str(e)[:2000]}"
            traceback.print_exc()
            return
        result["step_ms"].append((time.perf_counter() - start) * 1e3)
        result["values"].append(float(value))
        del value
        after = read_counters()
        result["counter_deltas"].append({n: after[n] - before[n] for n in after})
        before = after


def _load_workload(torch, name, result):
    """The workload's step function, or None with the result marked skipped or failed."""
    try:
        return WORKLOADS[name][0](torch)
    except ImportError as e:
        result.update(status="skipped", message=f"{type(e).__name__}: {e}")
    except Exception as e:
        result.update(status="oom" if _is_oom(torch, e) else "error",
                      message=f"setup: {type(e).__name__}: {str(e)[:2000]}")
        traceback.print_exc()
    return None


def child_main(mode, name, steps, deterministic):
    cudalloc = None
    if mode == "cudalloc":
        cudalloc = import_cudalloc()
        cudalloc.enable()  # before the first CUDA tensor
    import torch
    result = {"mode": mode, "workload": name, "status": "ok", "message": "",
              "steps": steps, "step_ms": [], "values": [], "counter_deltas": [],
              "value_kind": WORKLOADS[name][3], "torch": torch.__version__}
    if not torch.cuda.is_available():
        result.update(status="skipped", message="CUDA is not available")
        print_result(result)
        return 0
    result["device"] = torch.cuda.get_device_name()
    if cudalloc is not None:
        result.update(cudalloc_version=cudalloc.version(), library=cudalloc.library_path(),
                      cudalloc_conf=os.environ.get("CUDALLOC_CONF", ""))
    if deterministic:
        make_deterministic(torch)
    torch.manual_seed(0)
    start = time.perf_counter()
    step = _load_workload(torch, name, result)
    result["setup_s"] = time.perf_counter() - start
    if cudalloc is not None:  # older builds lack some counters; they read as 0
        result["counters_missing"] = [n for n in CUDALLOC_COUNTERS if n not in cudalloc.stats()]
    if step is not None:
        _run_steps(torch, step, steps, _counter_reader(torch, cudalloc), result)
    try:
        torch.cuda.synchronize()
        result.update(_peaks(torch, cudalloc))
        result["counters_end"] = _counter_reader(torch, cudalloc)()
    except Exception as e:  # a sticky CUDA error after a failed step
        result["message"] += f"; reading peaks: {type(e).__name__}: {e}"
    print_result(result)
    return 0


# ---- Parent side: running the children ----------------------------------------------------

def _without_limit(conf):
    keep = [p for p in conf.split(",") if p.strip()
            and p.split(":", 1)[0].strip().lower() != "limit"]
    return ",".join(keep)


def env_changes(mode, args, limit=None):
    """{variable: value, or None to remove it} for a child of `mode`."""
    changes = {"PYTORCH_CUDA_ALLOC_CONF": EXPANDABLE_CONF if mode == "expandable" else None}
    if mode == "cudalloc":
        conf = args.conf if args.conf is not None else os.environ.get("CUDALLOC_CONF", "")
        if limit is not None:
            conf = ",".join(p for p in [_without_limit(conf), f"limit:{limit}"] if p)
        changes["CUDALLOC_CONF"] = conf or None
    if args.deterministic:
        changes.update(DETERMINISTIC_ENV)
    return changes


def child_command(mode, name, steps, args):
    cmd = script_command(__file__, "--child", mode, "--workloads", name, "--steps", steps)
    return cmd + (["--deterministic"] if args.deterministic else [])


def run_child(mode, name, steps, args, changes):
    """Runs one child (stderr passes through); returns its result dict, failed or not."""
    run = run_script(child_command(mode, name, steps, args), env=child_env(changes),
                     timeout=args.child_timeout, echo_prefix=f"  [{name} {mode}] ")
    return run.checked_result()


def plan(args):
    """[(workload, round, mode)] in running order; expandable runs in round 0 only."""
    runs = []
    for name in args.workloads:
        for r in range(args.repeat):
            runs.extend((name, r, m) for m in args.modes if m != "expandable" or r == 0)
    return runs


def missing_modules(name):
    return [m for m in WORKLOADS[name][2] if importlib.util.find_spec(m) is None]


def _native_peak(results, name, r):
    """Peak reserved of the workload's native run of round r, else of any round, else None."""
    native = [x for x in results if x["workload"] == name and x["mode"] == "native"
              and x["status"] == "ok" and x.get("peak_reserved")]
    same = [x for x in native if x["round"] == r]
    return (same or native or [{}])[0].get("peak_reserved")


def _limit(results, name, r, mode, args):
    """cudalloc's limit in bytes under --limit-fraction (None: no limit, 0: no native peak)."""
    if mode != "cudalloc" or not args.limit_fraction:
        return None
    peak = _native_peak(results, name, r)
    return int(args.limit_fraction * peak) if peak else 0


def _progress(res):
    timed = res.get("step_ms", [])[WARMUP:]
    median = f"median {statistics.median(timed):.1f} ms" if timed else "no timed steps"
    peak = res.get("peak_reserved")
    peak = f"peak reserved {peak / GIB:.2f} GiB" if peak else "no peak"
    msg = f" ({res['message']})" if res.get("message") else ""
    print(f"{res['workload']} #{res['round'] + 1} {res['mode']}: {res['status']}{msg}; "
          f"{len(res.get('step_ms', []))} steps, {median}, {peak}, {res['wall_s']:.0f} s",
          flush=True)


def run_one(name, r, mode, args, results):
    """Runs (or skips) one child; returns its result with workload, round and mode."""
    base = {"workload": name, "round": r, "mode": mode}
    missing = missing_modules(name)
    limit = _limit(results, name, r, mode, args)
    if missing:
        return dict(base, status="skipped", message=f"{', '.join(missing)} not installed")
    if limit == 0:
        return dict(base, status="skipped", message="no native peak for --limit-fraction")
    steps = args.steps or WORKLOADS[name][1]
    start = time.perf_counter()
    res = run_child(mode, name, steps, args, env_changes(mode, args, limit))
    res.update(base, limit_bytes=limit, wall_s=time.perf_counter() - start)
    _progress(res)
    return res


def dry_run(args):
    for name, r, mode in plan(args):
        limit = None
        if mode == "cudalloc" and args.limit_fraction:
            limit = f"{args.limit_fraction}xNATIVE_PEAK_RESERVED"
        steps = args.steps or WORKLOADS[name][1]
        cmd = child_command(mode, name, steps, args)
        missing = missing_modules(name)
        note = f"   # would be skipped: {', '.join(missing)} not installed" if missing else ""
        print(f"# {name} round {r + 1} {mode}{note}")
        print(describe(env_changes(mode, args, limit), cmd))
    return 0


# ---- Report ---------------------------------------------------------------------------

def _median_ms(res):
    timed = res.get("step_ms", [])[WARMUP:] if res and res["status"] == "ok" else []
    return statistics.median(timed) if timed else None


def _timed_total_ms(res):
    """Sum of the timed steps: for varying shapes a fairer figure than the median."""
    timed = res.get("step_ms", [])[WARMUP:] if res and res["status"] == "ok" else []
    return sum(timed) if timed else None


def _late_sums(res, names):
    """The summed per-step deltas of `names` over the last half of the steps, or None where
    the run has no such counters or no steps."""
    if not res or any(n in res.get("counters_missing", []) for n in names):
        return None
    deltas = res.get("counter_deltas", [])
    return [sum(d.get(n, 0) for n in names) for d in deltas[len(deltas) // 2:]] or None


def _steady(res, names):
    """Median over the last half of the steps of the summed per-step deltas of `names`."""
    sums = _late_sums(res, names)
    return statistics.median(sums) if sums else None


def _mean_late(res, names):
    """Mean over the last half of the steps of the summed per-step deltas of `names`: unlike
    the median, it shows steps that remap a lot among many that remap nothing."""
    sums = _late_sums(res, names)
    return sum(sums) / len(sums) if sums else None


def values_diff(a, b):
    """Max relative difference of two loss/checksum lists over their common prefix
    (0.0: bitwise equal), and whether the lengths agree; None if either is empty."""
    if not a or not b:
        return None
    worst = 0.0
    for x, y in zip(a, b):
        if x == y:
            continue
        if not (math.isfinite(x) and math.isfinite(y)):
            worst = math.inf
            break
        worst = max(worst, abs(x - y) / max(abs(x), abs(y), 1e-30))
    return {"max_rel": worst, "same_length": len(a) == len(b), "compared": min(len(a), len(b))}


def _ratio(a, b):
    return a / b if a and b else None


def _ok(res, key):
    return res.get(key) if res and res["status"] == "ok" else None


def summarize_row(runs):
    """runs: {mode: result} of one workload and round -> a row of figures (None: not known)."""
    nat, exp, cud = (runs.get(m) for m in MODES)
    reserved = {m: _ok(runs.get(m), "peak_reserved") for m in MODES}
    allocated = {m: _ok(runs.get(m), "peak_allocated") for m in MODES}
    median = {m: _median_ms(runs.get(m)) for m in MODES}
    slower = _ratio(median["cudalloc"], median["native"])
    return {
        "status": {m: r["status"] for m, r in runs.items()},
        "peak_reserved": reserved, "peak_allocated": allocated,
        "fragmentation": {m: _ratio(reserved[m], allocated[m]) for m in MODES},
        "cudalloc_vs_native": _ratio(reserved["cudalloc"], reserved["native"]),
        "cudalloc_vs_expandable": _ratio(reserved["cudalloc"], reserved["expandable"]),
        "median_step_ms": median,
        "timed_total_ms": {m: _timed_total_ms(runs.get(m)) for m in MODES},
        "step_time_vs_native_pct": (slower - 1) * 100 if slower else None,
        "maps_unmaps_per_step": _steady(cud, ["page_maps", "page_unmaps"]),
        "maps_unmaps_per_step_mean": _mean_late(cud, ["page_maps", "page_unmaps"]),
        "page_waits_per_step": _steady(cud, ["page_waits"]),
        "device_allocs_per_step": _steady(cud, ["device_allocs"]),
        "values_vs_native": {m: values_diff(nat and nat.get("values"), r and r.get("values"))
                             for m, r in (("expandable", exp), ("cudalloc", cud))},
    }


def summarize(results, args):
    """[(label, row)], one per workload and round; expandable's run (round 0) in every row."""
    rows = []
    for name in args.workloads:
        for r in range(args.repeat):
            runs = {x["mode"]: x for x in results if x["workload"] == name
                    and (x["round"] == r or x["mode"] == "expandable")}
            if runs:
                label = name if args.repeat == 1 else f"{name} #{r + 1}"
                rows.append((label, summarize_row(runs)))
    return rows


STATUS_CELL = {"oom": "OOM", "failed": "failed", "error": "failed", "skipped": "skipped"}


def _cell(row, mode, value, fmt):
    """A figure, or why there is none."""
    status = row["status"].get(mode)
    if status is None:
        return "-"
    if status != "ok":
        return STATUS_CELL.get(status, status)
    return fmt(value) if value is not None else "n/a"


def _num(value, fmt):
    return fmt.format(value) if value is not None else "-"


def _diff_cell(d):
    if d is None:
        return "-"
    text = "=" if d["max_rel"] == 0 else f"{d['max_rel']:.1e}"
    return text + ("" if d["same_length"] else f" ({d['compared']} steps)")


def _gib(n):
    return f"{n / GIB:.2f}"


def main_table(rows):
    lines = ["| workload | native peak reserved GiB | expandable | cudalloc | cudalloc/native "
             "| cudalloc/expandable | median step ms native / expandable / cudalloc "
             "| cudalloc step time vs native | maps+unmaps per step (steady) "
             "| losses vs native: cudalloc / expandable |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for label, row in rows:
        peaks = [_cell(row, m, row["peak_reserved"][m], _gib) for m in MODES]
        times = [_cell(row, m, row["median_step_ms"][m], "{:.1f}".format) for m in MODES]
        diffs = [_diff_cell(row["values_vs_native"][m]) for m in ("cudalloc", "expandable")]
        cells = [label] + peaks + [
            _num(row["cudalloc_vs_native"], "{:.3f}"),
            _num(row["cudalloc_vs_expandable"], "{:.3f}"),
            " / ".join(times), _num(row["step_time_vs_native_pct"], "{:+.1f}%"),
            _cell(row, "cudalloc", row["maps_unmaps_per_step"], "{:g}".format),
            " / ".join(diffs)]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def totals_table(rows):
    """Sums of the timed steps: where shapes vary, the steps that meet new sizes count."""
    lines = ["| workload | timed steps total s native / expandable / cudalloc "
             "| cudalloc total vs native | vs expandable "
             "| maps+unmaps per step, mean of the last half |", "|---|---|---|---|---|"]
    for label, row in rows:
        totals = row["timed_total_ms"]
        cells = [_cell(row, m, totals[m], lambda v: f"{v / 1e3:.3f}") for m in MODES]
        vs = [_ratio(totals["cudalloc"], totals[m]) for m in ("native", "expandable")]
        lines.append("| " + " | ".join(
            [label, " / ".join(cells)] +
            [_num((r - 1) * 100 if r else None, "{:+.1f}%") for r in vs] +
            [_cell(row, "cudalloc", row["maps_unmaps_per_step_mean"], "{:.1f}".format)]) + " |")
    return lines


def fragmentation_table(rows):
    lines = ["| workload | peak allocated GiB native / expandable / cudalloc "
             "| reserved/allocated native | expandable | cudalloc |", "|---|---|---|---|---|"]
    for label, row in rows:
        alloc = [_cell(row, m, row["peak_allocated"][m], _gib) for m in MODES]
        frag = [_cell(row, m, row["fragmentation"][m], "{:.3f}".format) for m in MODES]
        lines.append("| " + " | ".join([label, " / ".join(alloc)] + frag) + " |")
    return lines


def _header(results, args):
    first = next((x for x in results if x.get("device")), {})
    cud = next((x for x in results if x.get("cudalloc_version")), {})
    conf = env_changes("cudalloc", args).get("CUDALLOC_CONF") or ""
    conf = (_without_limit(conf) if args.limit_fraction else conf) or "(none)"
    parts = [time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), first.get("device", "no GPU"),
             f"torch {first.get('torch', '?')}", f"cudalloc {cud.get('cudalloc_version', '?')}",
             f"CUDALLOC_CONF={conf}"]
    if args.limit_fraction:
        parts.append(f"cudalloc limit {args.limit_fraction} x native peak reserved")
    parts.append("deterministic kernels" if args.deterministic else "default kernels")
    return ", ".join(parts) + f"; `{shlex.join(['torch_workloads.py'] + sys.argv[1:])}`"


NOTES = [
    "Median step time over the steps after the first 2. maps+unmaps: cudalloc's page_maps + "
    "page_unmaps per step, median over the last half of the steps (n/a: a library without "
    "these counters). Losses (inference: output "
    "checksums) against native: '=' bitwise equal, else the largest relative difference; "
    "without --deterministic, atomics can make native differ from itself as much.",
]


def print_report(results, args):
    rows = summarize(results, args)
    print()
    print(_header(results, args))
    print()
    print("\n".join(main_table(rows)))
    print()
    print("\n".join(totals_table(rows)))
    print()
    print("\n".join(fragmentation_table(rows)))
    print()
    print("\n".join(NOTES))
    return rows


def write_json(path, results, rows, args):
    doc = {"benchmark": "torch_workloads", "date": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                 time.gmtime()),
           "argv": sys.argv[1:], "warmup_steps": WARMUP, "options": vars(args),
           "rows": [dict(row, label=label) for label, row in rows], "runs": results}
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1)
    os.replace(tmp, path)


# ---- Main -----------------------------------------------------------------------------

def _names(text, known, what):
    names = [n.strip() for n in text.split(",") if n.strip()]
    bad = [n for n in names if n not in known]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"unknown {what} {bad}; known: {', '.join(known)}")
    return names


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workloads", default=",".join(MAIN_WORKLOADS),
                   type=lambda s: _names(s, list(WORKLOADS), "workload"),
                   help=f"comma-separated, of: {', '.join(WORKLOADS)} (default: the main five)")
    p.add_argument("--modes", default=",".join(MODES),
                   type=lambda s: _names(s, MODES, "mode"), help="of native,expandable,cudalloc")
    p.add_argument("--steps", type=int, help="steps per run, warm-up included "
                   "(default per workload: " + ", ".join(
                       f"{n} {w[1]}" for n, w in WORKLOADS.items()) + ")")
    p.add_argument("--json", metavar="PATH", help="write everything measured here as JSON")
    p.add_argument("--conf", help="CUDALLOC_CONF for cudalloc (default: the environment's)")
    p.add_argument("--repeat", type=int, default=1, help="native/cudalloc rounds (default 1)")
    p.add_argument("--limit-fraction", type=float, metavar="F",
                   help="cudalloc limit = F x the workload's native peak reserved")
    p.add_argument("--deterministic", action="store_true", help="deterministic kernels")
    p.add_argument("--child-timeout", type=float, default=240, metavar="S",
                   help="seconds per child before it is killed (default 240)")
    p.add_argument("--dry-run", action="store_true", help="print the child commands only")
    p.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.modes = [m for m in MODES if m in args.modes]  # native first: --limit-fraction
    if args.steps is not None and args.steps <= WARMUP:
        p.error(f"--steps must be more than the {WARMUP} warm-up steps")
    if args.repeat < 1:
        p.error("--repeat must be at least 1")
    if args.limit_fraction is not None and args.limit_fraction <= 0:
        p.error("--limit-fraction must be positive")
    return args


def _exit_status(results, args):
    ran = [x for x in results if x["status"] != "skipped"]
    if not ran:
        return SKIP
    allowed = {"ok", "oom"} if args.limit_fraction else {"ok"}
    return 0 if all(x["status"] in allowed for x in ran) else 1


def main(argv=None):
    args = parse_args(argv)
    if args.child:
        name = args.workloads[0]
        return child_main(args.child, name, args.steps or WORKLOADS[name][1], args.deterministic)
    if args.dry_run:
        return dry_run(args)
    if importlib.util.find_spec("torch") is None:
        print("SKIP: torch is not installed")
        return SKIP
    results = []
    for name, r, mode in plan(args):
        results.append(run_one(name, r, mode, args, results))
        if args.json:
            write_json(args.json, results, summarize(results, args), args)
    rows = print_report(results, args)
    if args.json:
        write_json(args.json, results, rows, args)
    return _exit_status(results, args)


if __name__ == "__main__":
    sys.exit(main())
