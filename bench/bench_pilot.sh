#!/usr/bin/env bash
# `anchor pilot` vs an equivalent hand-written PyTorch pilot (bench/python_pilot.py),
# side by side on the same config (issue 3, "Benchmark"). Run by hand; ctest
# bench.pilot_tiny runs it once on the tiny default, never timed.
#
#   bench/bench_pilot.sh [--reps N] [--config FILE] [--anchor BIN] [--python PY]
#                        [--anchor-arg ARG]... [--peer-env NAME=VALUE]...
#                        [--require-close REL | --require-bitwise] [--keep] [--workdir EMPTY_DIR]
#
# One warm-up run of each, then N (default 3) repetitions of each, interleaved
# (anchor, python, anchor, python, ...) so background load hits both alike;
# medians are compared. Prints whole-pilot wall time, the train step time (the
# K-th step, full optimizer state: compute_s + data_wait_s), peak RSS (max over
# the supervisor/parent and every worker) and the ratios anchor/python against
# the issue's goals (<= 0.6x, <= 1.0x, <= 0.6x), plus where each side's time goes.
# --peer-env runs the Python pilot with a variable set, e.g. the thread pools'
# wait settings anchor starts its workers with (GOMP_SPINCOUNT=10000
# OPENBLAS_THREAD_TIMEOUT=4; docs/benchmarks.md): the peer as written, or like for like.
# Exits 1 when a pilot's resume fails; with --require-close REL also when a loss
# of one pilot differs from the other's by more than REL x the larger (ctest
# bench.pilot_tiny: 1e-6; why that holds on any CPU: docs/benchmarks.md, "Anchor
# and the peer train alike"), or either side's losses change between
# repetitions; with --require-bitwise when they are not bitwise equal (on
# PyTorch 2.x at 25M with 2 threads the later steps differ in the last bits).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
reps=3
config=$repo/configs/pilot.yaml
anchor=$repo/build/release/bin/anchor
py=/usr/bin/python3
keep=0
workdir=
anchor_args=()
peer_env=()
require_bitwise=0
require_close=

usage() { sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; }
while [[ $# -gt 0 ]]; do
  case $1 in
    --reps) reps=$2; shift 2 ;;
    --config) config=$2; shift 2 ;;
    --anchor) anchor=$2; shift 2 ;;
    --python) py=$2; shift 2 ;;
    --anchor-arg) anchor_args+=("$2"); shift 2 ;;
    --peer-env) [[ $2 =~ ^[A-Za-z_][A-Za-z0-9_]*= ]] || { echo "bench_pilot.sh: --peer-env wants NAME=VALUE" >&2; exit 2; }
                peer_env+=("$2"); shift 2 ;;
    --require-bitwise) require_bitwise=1; shift ;;
    --require-close) [[ $2 =~ ^[0-9.]+([eE]-?[0-9]+)?$ ]] || { echo "bench_pilot.sh: --require-close wants a number (1e-6)" >&2; exit 2; }
                     require_close=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    --workdir) workdir=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "bench_pilot.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
  esac
done
[[ $reps =~ ^[1-9][0-9]*$ ]] || { echo "bench_pilot.sh: --reps wants a positive integer" >&2; exit 2; }
[[ -x $anchor ]] || { echo "bench_pilot.sh: no anchor binary at $anchor (build it, or pass --anchor)" >&2; exit 2; }
[[ -x /usr/bin/time ]] || { echo "bench_pilot.sh: needs GNU time at /usr/bin/time (apt-get install time)" >&2; exit 2; }
# Absolute: the runs start in their own directories.
py=$(command -v "$py") || { echo "bench_pilot.sh: no Python '$py'" >&2; exit 2; }
[[ $py == /* ]] || py="$(cd "$(dirname "$py")" && pwd)/$(basename "$py")"
"$py" -c 'import torch, yaml' 2>/dev/null || { echo "bench_pilot.sh: $py cannot import torch and yaml" >&2; exit 2; }
config=$(cd "$(dirname "$config")" && pwd)/$(basename "$config")

# A --workdir of yours is never deleted; the default temp dir is unless --keep.
if [[ -z $workdir ]]; then workdir=$(mktemp -d "${TMPDIR:-/tmp}/anchor-bench-pilot.XXXXXX"); else keep=1; fi
mkdir -p "$workdir"
[[ -z $(ls -A "$workdir") ]] || { echo "bench_pilot.sh: --workdir $workdir is not empty" >&2; exit 2; }
workdir=$(cd "$workdir" && pwd)
# A failed run keeps it too, for its logs.
cleanup() { local rc=$?; if [[ $keep == 0 && $rc == 0 ]]; then rm -rf "$workdir"; else echo "kept: $workdir"; fi; }
trap cleanup EXIT

now() { date +%s.%N; }

# A private copy: others rebuild build/release while this runs. The supervisor
# starts its workers from anchor-torch beside its own /proc/self/exe, so they
# use the copy too.
cp "$anchor" "$workdir/anchor"
cp "$(dirname "$anchor")/anchor-torch" "$workdir/anchor-torch"
anchor_src=$anchor
anchor=$workdir/anchor

# run_one KIND NAME: one pilot, its wall time and the max RSS of its process tree
# (GNU time's %M is wait4's ru_maxrss: the largest of the process and every
# descendant it reaped, so the supervisor/parent and every worker).
run_one() {
  local kind=$1 name=$2 d=$workdir/$1-$2 t0 t1 rc=0
  mkdir -p "$d"
  t0=$(now)
  if [[ $kind == anchor ]]; then
    (cd "$d" && /usr/bin/time -f '%M %U %S' -o "$d/time.txt" \
       "$anchor" pilot "$config" --run-dir "$d/run" "${anchor_args[@]}" >"$d/log.txt" 2>&1) || rc=$?
  else
    (cd "$d" && /usr/bin/time -f '%M %U %S' -o "$d/time.txt" \
       env "${peer_env[@]}" "$py" "$here/python_pilot.py" "$config" --run-dir "$d/run" --json >"$d/log.txt" 2>&1) || rc=$?
  fi
  t1=$(now)
  if [[ $rc != 0 ]]; then
    echo "bench_pilot.sh: $kind pilot $name failed (exit $rc); its log:" >&2
    tail -n 30 "$d/log.txt" >&2
    exit 1
  fi
  local rss user sys
  read -r rss user sys < <(tail -n 1 "$d/time.txt")
  printf '{"kind":"%s","name":"%s","t0":%s,"t1":%s,"maxrss_kb":%s,"cpu_s":%s}\n' \
    "$kind" "$name" "$t0" "$t1" "$rss" "$(awk -v u="$user" -v s="$sys" 'BEGIN{print u+s}')" >>"$workdir/runs.jsonl"
  printf '  %-8s %-10s %7.3f s\n' "$kind" "$name" "$(awk -v a="$t0" -v b="$t1" 'BEGIN{print b-a}')"
}

echo "== anchor pilot vs python pilot: $config"
echo "   anchor: $anchor_src ${anchor_args[*]:-} ($("$anchor" --version), run from a copy)"
echo "   python: ${peer_env[*]:-} $py $here/python_pilot.py (torch $("$py" -c 'import torch; print(torch.__version__)'))"
echo "   $(nproc) CPUs; load at start: $(uptime | sed 's/.*load average/load average/')"
echo "   warm-up (not counted), then $reps repetitions each, interleaved:"
: >"$workdir/runs.jsonl"
run_one anchor warmup
run_one python warmup
for ((i = 1; i <= reps; i++)); do
  run_one anchor "rep$i"
  run_one python "rep$i"
done
load_end=$(uptime | sed 's/.*load average/load average/')

"$py" - "$workdir" "$load_end" "$require_bitwise" "$require_close" <<'EOF'
import datetime, json, os, statistics, sys

work, load_end, require_bitwise = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
require_close = float(sys.argv[4]) if sys.argv[4] else None
runs = [json.loads(l) for l in open(os.path.join(work, "runs.jsonl"))]
MiB = 1024.0 * 1024.0


def ts(s):  # events.jsonl times: the supervisor's 2026-11-29T18:20:28.908Z, a worker protocol line's Unix seconds
    if isinstance(s, (int, float)):
        return float(s)
    return datetime.datetime.strptime(s, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=datetime.timezone.utc).timestamp()


def event_key(e):
    """(source, stage or worker, event) of a line: the supervisor's own events, and the workers'
    protocol lines (docs/program.md, "The contract") named as the supervisor names its own."""
    if e.get("type") == "stage":
        return (e["source"], e["stage"], "start" if e["phase"] == "begin" else e["phase"])
    if e.get("type") == "checkpoint" and e.get("phase") == "kill_window":
        return (e["source"], "kill", "kill_window")
    return (e["source"], e.get("stage") or e.get("worker"), e.get("event") or e.get("type"))


def anchor_figures(r):
    d = os.path.join(work, r["kind"] + "-" + r["name"], "run")
    rep = json.load(open(os.path.join(d, "report.json")))
    m = rep["measurements"]
    mem = m["memory"]
    if "workers" in mem:  # per-worker peaks; the probe worker (if any) is in the tree's %M
        workers = [mem["workers"][w]["peak_rss_bytes"] for w in ("reference", "resume")]
    else:
        workers = [mem[w]["peak_rss_bytes"] for w in ("reference_worker", "resume_worker")]
    ev = {}
    for line in open(os.path.join(d, "events.jsonl")):
        e = json.loads(line)
        ev.setdefault(event_key(e), ts(e["time"]))
    sup, A, B = "supervisor", "worker-reference", "worker-resume"
    seg = {  # where the wall time goes, from the event log (ms resolution)
        "supervisor start-up (exec, config; no libtorch)": ev[(sup, "reference", "worker_started")] - r["t0"],
        "worker A start-up (exec, libtorch load)": ev[(A, "pin", "start")] - ev[(sup, "reference", "worker_started")],
        "pin in worker A (manifest, hash cache)": ev[(A, "pin", "end")] - ev[(A, "pin", "start")],
        "worker A load..kill window": ev[(A, "kill", "kill_window")] - ev[(A, "load", "start")],
        "SIGKILL, reap, read reference.json": ev[(sup, "kill", "start")] - ev[(sup, "kill", "sigkill_sent")],
        "kill to worker B's restore (its release; its start-up unless early)": ev[(B, "restore", "start")] - ev[(sup, "kill", "end")],
        "worker B restore..resume end": ev[(B, "resume", "end")] - ev[(B, "restore", "start")],
        "worker B exit, read resume.json": ev[(sup, "compare", "start")] - ev[(B, "resume", "end")],
    }
    P = "worker-probe"
    if (P, "memory_probe", "start") in ev:  # a third worker: the memory probe
        seg["compare, start probe worker (exec, libtorch load)"] = ev[(P, "memory_probe", "start")] - ev[(sup, "compare", "end")]
        seg["probe worker memory_probe stage"] = ev[(P, "memory_probe", "end")] - ev[(P, "memory_probe", "start")]
        seg["probe exit, report, summary, exit"] = r["t1"] - ev[(P, "memory_probe", "end")]
    else:
        seg["compare, report, summary, exit"] = r["t1"] - ev[(sup, "compare", "end")]
    stages = {s["stage"]: s.get("seconds", 0.0) for s in rep["stages"]}
    losses = [s["loss"] for k in ("train", "reference", "resume") for s in rep["steps"][k]]
    return {"wall": r["t1"] - r["t0"], "step": m["step"]["seconds"], "cpu": r["cpu_s"],
            "rss": max(r["maxrss_kb"] * 1024, *workers), "tree_rss": r["maxrss_kb"] * 1024,
            "workers_rss": workers, "seg": seg, "stages": stages, "losses": losses,
            "verdict": rep["status"]}


def python_figures(r):
    s = json.load(open(os.path.join(work, r["kind"] + "-" + r["name"], "run", "summary.json")))
    w = s["workers"]
    st = {role: {x["stage"]: x["seconds"] for x in s["stages"][role]} for role in ("reference", "resume")}
    seg = {
        "parent start-up (interpreter, no torch)": s["parent_startup_s"],
        "worker A import torch": st["reference"]["import_torch"],
        "worker A load..kill window": sum(v for k, v in st["reference"].items() if k != "import_torch"),
        "worker A other (exec, config, kill, reap)": w["reference"]["wall_s"] - sum(st["reference"].values()),
        "worker B import torch": st["resume"]["import_torch"],
        "worker B restore..resume end": sum(v for k, v in st["resume"].items() if k != "import_torch"),
        "worker B other (exec, config, interpreter exit)": w["resume"]["wall_s"] - sum(st["resume"].values()),
        "compare, summary, parent exit": (r["t1"] - r["t0"]) - s["parent_startup_s"] - w["reference"]["wall_s"] - w["resume"]["wall_s"],
    }
    workers = [w["reference"]["peak_rss_bytes"], w["resume"]["peak_rss_bytes"]]
    losses = s["losses"]["train"] + s["losses"]["reference"] + s["losses"]["resume"]
    return {"wall": r["t1"] - r["t0"], "step": s["step"]["seconds"], "cpu": r["cpu_s"],
            "rss": max(r["maxrss_kb"] * 1024, *workers), "tree_rss": r["maxrss_kb"] * 1024,
            "workers_rss": workers, "seg": seg, "stages": st, "losses": losses, "verdict": s["verdict"]}


res = {"anchor": [], "python": []}
for r in runs:
    if r["name"] == "warmup":
        continue
    res[r["kind"]].append((anchor_figures if r["kind"] == "anchor" else python_figures)(r))

med = lambda kind, key: statistics.median(x[key] for x in res[kind])
n = len(res["anchor"])
print("\n== results: median of %d runs each (load at end: %s)" % (n, load_end))
print("  %-34s %10s %10s %8s %7s  %s" % ("metric", "anchor", "python", "ratio", "goal", "verdict"))
rows = [("whole pilot wall time (s)", "wall", 1, 0.6, "%10.3f"),
        ("train step K (s)", "step", 1, 1.0, "%10.4f"),
        ("peak RSS, all processes (MiB)", "rss", MiB, 0.6, "%10.1f")]
for label, key, scale, goal, fmt in rows:
    a, p = med("anchor", key), med("python", key)
    ratio = a / p
    print("  %-34s " % label + fmt % (a / scale) + " " + fmt % (p / scale) +
          " %7.2fx %6.1fx  %s" % (ratio, goal, "met" if ratio <= goal else "NOT met"))
a, p = med("anchor", "cpu"), med("python", "cpu")
print("  %-34s %10.3f %10.3f %7.2fx %7s  %s" % ("CPU time user+sys, all processes", a, p, a / p, "-",
                                               "(no goal; less sensitive to load than wall time)"))
print("  per run (anchor / python): wall %s / %s s; step %s / %s ms" % (
    [round(x["wall"], 2) for x in res["anchor"]], [round(x["wall"], 2) for x in res["python"]],
    [round(x["step"] * 1e3, 1) for x in res["anchor"]], [round(x["step"] * 1e3, 1) for x in res["python"]]))
print("  peak RSS by process (median, MiB): anchor worker A %.1f, worker B %.1f, whole tree %.1f;"
      " python worker A %.1f, worker B %.1f, whole tree %.1f" % (
          statistics.median(x["workers_rss"][0] for x in res["anchor"]) / MiB,
          statistics.median(x["workers_rss"][1] for x in res["anchor"]) / MiB,
          med("anchor", "tree_rss") / MiB,
          statistics.median(x["workers_rss"][0] for x in res["python"]) / MiB,
          statistics.median(x["workers_rss"][1] for x in res["python"]) / MiB,
          med("python", "tree_rss") / MiB))
la, lp = res["anchor"][0]["losses"], res["python"][0]["losses"]
agree = 0
while agree < min(len(la), len(lp)) and la[agree] == lp[agree]:
    agree += 1
# Every repetition of either side trains as the first of the other did (each is deterministic).
same_every_rep = all(x["losses"] == la for x in res["anchor"]) and all(x["losses"] == lp for x in res["python"])
print("  resume verdicts: anchor %s, python %s" % (
    sorted({x["verdict"] for x in res["anchor"]}), sorted({x["verdict"] for x in res["python"]})))
print("  losses (train K, reference R, resume R): anchor %s" % [round(v, 4) for v in la])
print("                                           python %s" % [round(v, 4) for v in lp])
print("  bitwise equal between the pilots: %s" % (
    "all %d" % len(la) if agree == len(la) == len(lp) else "the first %d of %d" % (agree, len(la))))
# The largest difference of one loss, relative to the larger of the two (a measurement; the gate of --require-close).
rel = [abs(a - p) / max(abs(a), abs(p), 1e-12) for a, p in zip(la, lp)]
worst = max(rel) if rel else 0.0
print("  largest relative difference of a loss: %.3g%s" % (
    worst, "" if require_close is None else " (--require-close %g: %s)" % (
        require_close, "within" if worst <= require_close else "NOT within")))

for kind in ("anchor", "python"):
    print("\n== where %s's wall time goes (median over runs, s)" % kind)
    keys = list(res[kind][0]["seg"])
    total = 0.0
    for k in keys:
        v = statistics.median(x["seg"][k] for x in res[kind])
        total += v
        print("  %-52s %7.3f" % (k, v))
    print("  %-52s %7.3f  (whole pilot median %.3f)" % ("sum of medians", total, med(kind, "wall")))

# Exit 1 when a resume failed, or (--require-close, ctest bench.pilot_tiny; --require-bitwise) the two
# did not train alike.
failed = [x["verdict"] for x in res["anchor"] if x["verdict"] != "passed"] + \
         [x["verdict"] for x in res["python"] if x["verdict"] != "match"]
unlike = (require_bitwise or require_close is not None) and (len(la) != len(lp) or not same_every_rep)
if require_bitwise:
    unlike = unlike or agree != len(la)
if require_close is not None:
    unlike = unlike or worst > require_close
if failed or unlike:
    print("\nbench_pilot.sh: the pilots differ (losses equal: %d of %d; largest relative difference %.3g;"
          " the same in every repetition: %s; verdicts not passed/match: %s)" % (
              agree, len(la), worst, same_every_rep, failed or "none"), file=sys.stderr)
    sys.exit(1)
EOF
