#!/usr/bin/env bash
# `anchor pin` vs `openssl dgst -sha256` on the same data files (issue 16,
# "anchor pin without LibTorch"). Run by hand; CTest runs it once at a tiny size.
#
#   bench/bench_pin.sh [--reps N] [--big-mib M] [--files N] [--file-mib M]
#                      [--anchor BIN] [--keep] [--workdir EMPTY_DIR]
#
# Three cases, each repeated N times (default 3) interleaved with its peer, medians compared:
#   one big file    anchor pin of a config naming one M MiB file (default 2048)
#                   vs openssl dgst -sha256 FILE
#   many files      anchor pin of a glob over N files of M MiB (default 200 x 10)
#                   vs openssl dgst -sha256 FILE... (one process); anchor hashes
#                   with one thread per CPU
#   no-change re-pin  anchor pin again, nothing changed (goal: under 20 ms), and
#                   anchor-torch pin again (LibTorch in the process: the old path)
# Each anchor pin of new data starts from a copy of a warm cache that knows the
# installed libraries and anchor-torch's answer, not the data: the case of new
# data on an installed node. The data digests are checked against openssl's.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
reps=3
big_mib=2048
files=200
file_mib=10
anchor=$repo/build/release/bin/anchor
keep=0
workdir=

usage() { sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; }
while [[ $# -gt 0 ]]; do
  case $1 in
    --reps) reps=$2; shift 2 ;;
    --big-mib) big_mib=$2; shift 2 ;;
    --files) files=$2; shift 2 ;;
    --file-mib) file_mib=$2; shift 2 ;;
    --anchor) anchor=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    --workdir) workdir=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "bench_pin.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
  esac
done
for v in reps big_mib files file_mib; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "bench_pin.sh: --${v//_/-} wants a positive integer" >&2; exit 2; }
done
[[ -x $anchor ]] || { echo "bench_pin.sh: no anchor binary at $anchor (build it, or pass --anchor)" >&2; exit 2; }
[[ -x $(dirname "$anchor")/anchor-torch ]] || { echo "bench_pin.sh: no anchor-torch beside $anchor" >&2; exit 2; }
command -v openssl >/dev/null || { echo "bench_pin.sh: needs openssl" >&2; exit 2; }

if [[ -z $workdir ]]; then workdir=$(mktemp -d "${TMPDIR:-/tmp}/anchor-bench-pin.XXXXXX"); else keep=1; fi
mkdir -p "$workdir"
[[ -z $(ls -A "$workdir") ]] || { echo "bench_pin.sh: --workdir $workdir is not empty" >&2; exit 2; }
workdir=$(cd "$workdir" && pwd)
cleanup() { if [[ $keep == 0 ]]; then rm -rf "$workdir"; else echo "kept: $workdir"; fi; }
trap cleanup EXIT

# A private copy of both binaries: a rebuild while this runs changes nothing here.
mkdir -p "$workdir/bin"
cp "$anchor" "$workdir/bin/anchor"
cp "$(dirname "$anchor")/anchor-torch" "$workdir/bin/anchor-torch"
front=$workdir/bin/anchor
torch=$workdir/bin/anchor-torch

echo "bench_pin.sh: $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg); data ${big_mib} MiB + ${files} x ${file_mib} MiB"
cd "$workdir"
head -c $((big_mib * 1048576)) /dev/urandom > big.bin
mkdir -p shards
for ((i = 0; i < files; i++)); do head -c $((file_mib * 1048576)) /dev/urandom > "$(printf 'shards/f%04d.bin' "$i")"; done
printf 'data:\n  train: [big.bin]\n' > big.yaml
printf 'data:\n  train: ["shards/*.bin"]\n' > many.yaml
printf 'data:\n  train: [tiny.bin]\n' > tiny.yaml
head -c 4096 /dev/urandom > tiny.bin
sleep 0.2  # older than the hash cache's racy-clean margin (docs/manifest.md)

# The warm cache: the installed libraries and anchor-torch's answer, no data.
ANCHOR_CACHE_DIR=$workdir/warm "$front" pin tiny.yaml -o warm.json 2>/dev/null
# Page cache warm for both sides alike.
cat big.bin shards/*.bin > /dev/null

elapsed() {  # elapsed SECONDS-VAR CMD...: runs CMD (stdout and stderr to /dev/null), seconds into VAR
  local -n out=$1; shift
  local t0=$EPOCHREALTIME
  "$@" > /dev/null 2>&1
  out=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.4f", b - a }')
}
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2fx", a / b }'; }
fresh_cache() { rm -rf "$workdir/c"; cp -r "$workdir/warm" "$workdir/c"; }

a_big=() o_big=() a_many=() o_many=() a_re=() t_re=()
for ((r = 1; r <= reps; r++)); do
  fresh_cache
  elapsed s env ANCHOR_CACHE_DIR="$workdir/c" "$front" pin big.yaml -o big.json; a_big+=("$s")
  elapsed s openssl dgst -sha256 big.bin; o_big+=("$s")
  fresh_cache
  elapsed s env ANCHOR_CACHE_DIR="$workdir/c" "$front" pin many.yaml -o many.json; a_many+=("$s")
  elapsed s openssl dgst -sha256 shards/*.bin; o_many+=("$s")
  elapsed s env ANCHOR_CACHE_DIR="$workdir/c" "$front" pin many.yaml -o re.json; a_re+=("$s")
  elapsed s env ANCHOR_CACHE_DIR="$workdir/c" "$torch" pin many.yaml -o re-torch.json; t_re+=("$s")
done

# The digests are openssl's, and the re-pin read no data and did not start anchor-torch.
python3 - "$workdir" <<'EOF'
import json, subprocess, sys
w = sys.argv[1]
def files(m):
    return {f["path"]: f["sha256"] for f in json.load(open(f"{w}/{m}"))["data"]["train"]["files"]}
for m, paths in (("big.json", ["big.bin"]), ("many.json", None)):
    got = files(m)
    paths = paths or sorted(got)
    out = subprocess.run(["openssl", "dgst", "-sha256", "-r", *paths], cwd=w, capture_output=True, text=True, check=True).stdout
    want = {line.split()[1].lstrip("*"): line.split()[0] for line in out.splitlines()}
    assert got == want, f"{m}: anchor's digests differ from openssl's"
re = json.load(open(f"{w}/re.json"))["hashing"]
assert re["files_hashed"] == 0 and re["training_process"]["source"] == "cached", re
EOF

mb=$(median "${a_big[@]}"); ob=$(median "${o_big[@]}")
mm=$(median "${a_many[@]}"); om=$(median "${o_many[@]}")
mr=$(median "${a_re[@]}"); tr=$(median "${t_re[@]}")
printf '\n%-40s %10s %10s %8s  %s\n' "case (median of $reps)" "anchor s" "peer s" "ratio" "goal"
printf '%-40s %10s %10s %8s  %s\n' "one ${big_mib} MiB file vs openssl dgst" "$mb" "$ob" "$(ratio "$mb" "$ob")" "<= 1.0x"
printf '%-40s %10s %10s %8s  %s\n' "${files} x ${file_mib} MiB vs openssl dgst" "$mm" "$om" "$(ratio "$mm" "$om")" "<= 1.0x"
printf '%-40s %10s %10s %8s  %s\n' "no-change re-pin vs anchor-torch pin" "$mr" "$tr" "$(ratio "$mr" "$tr")" "anchor < 0.020 s"
echo "load at end: $(cut -d' ' -f1-3 /proc/loadavg)"
