#!/usr/bin/env bash
# Runs the workloads of issue 16's target table, interleaved, and prints each ratio per round and its median.
# One command for any machine (the 2-core VM, a device host): every ratio is taken against a baseline or a
# sibling workload measured in the same round, as docs/PERFORMANCE.md asks.
#
#   scripts/bench-targets.sh [--rounds N] [--only page|tiny|tcp|ucx|shm ...] [--out DIR] [--extra 'BENCH ARGS']
#
# --extra adds bench flags to every run (e.g. '--requests 8 --warmup 0' for a smoke run; not for figures).
# Needs the built launcher (./kvferry, or the command in KVFERRY_BIN) and python3; tcp's row needs iperf3, ucx's row ucx_perftest (ucx-utils).
# A row whose tool is missing is skipped with a note, not failed. Raw JSON of every run is kept in --out.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
rounds=3
out=""
only=()
extra=()
while [ $# -gt 0 ]; do
  case "$1" in --rounds|--only|--out|--extra) [ $# -ge 2 ] || { echo "bench-targets: $1 needs a value" >&2; exit 2; } ;; esac
  case "$1" in
    --rounds) rounds="$2"; shift 2 ;;
    --only)
      case "$2" in page|tiny|tcp|ucx|shm) only+=("$2") ;;
        *) echo "bench-targets: --only takes page, tiny, tcp, ucx or shm, got '$2'" >&2; exit 2 ;; esac
      shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --extra) read -r -a extra <<< "$2"; shift 2 ;;
    -h|--help) sed -n '2,11p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) echo "bench-targets: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ "$rounds" =~ ^[1-9][0-9]?$ ]] || { echo "bench-targets: --rounds must be 1..99, got '$rounds'" >&2; exit 2; }
command -v python3 >/dev/null || { echo "bench-targets: python3 is needed to read the bench's JSON" >&2; exit 2; }
bin="${KVFERRY_BIN:-./kvferry}"
[ -x "$bin" ] || { echo "bench-targets: $bin not found or not executable (README quick start builds ./kvferry)" >&2; exit 2; }
[ -n "$out" ] || out="$(mktemp -d -t kvferry-targets.XXXXXX)"
mkdir -p "$out"
wanted() { [ "${#only[@]}" -eq 0 ] && return 0; local w; for w in "${only[@]}"; do [ "$w" = "$1" ] && return 0; done; return 1; }

# run NAME ROUND ARGS...: one bench run, its JSON (the last line of --json output) kept as NAME.ROUND.json.
run() {
  local name="$1" round="$2"; shift 2
  local file="$out/$name.$round.json"
  if "$bin" bench "$@" ${extra[@]+"${extra[@]}"} --json > "$out/$name.$round.log" 2>&1; then :; else
    echo "  $name (round $round) exited $?; see $out/$name.$round.log" >&2
  fi
  tail -n 1 "$out/$name.$round.log" > "$file"
}

for ((r = 1; r <= rounds; r++)); do
  echo "round $r of $rounds" >&2
  if wanted page; then
    run page1 "$r" --processes --prompt-tokens 4096 --page-size 1
    run page16 "$r" --processes --prompt-tokens 4096 --page-size 16
  fi
  if wanted tiny; then
    run tiny64 "$r" --model tiny --prompt-tokens 16 --concurrency 64
    run tiny10000 "$r" --model tiny --prompt-tokens 16 --concurrency 10000 --room-memory
    run tiny64p "$r" --processes --model tiny --prompt-tokens 16 --concurrency 64
    run tiny10000p "$r" --processes --model tiny --prompt-tokens 16 --concurrency 10000
  fi
  if wanted tcp; then
    if command -v iperf3 >/dev/null; then run tcp "$r" --processes --prompt-tokens 4096 --iperf3
    else echo "  tcp: iperf3 not installed, row skipped" >&2; fi
  fi
  if wanted ucx; then
    if command -v ucx_perftest >/dev/null; then run ucx "$r" --transport ucx --processes --concurrency 1 --transfer-workers 1
    else echo "  ucx: ucx_perftest not installed, row skipped" >&2; fi
  fi
  if wanted shm; then
    run shm "$r" --transport shm --processes --concurrency 1 --transfer-workers 1 --paired-memcpy
  fi
done

python3 - "$out" "$rounds" <<'EOF'
import json, os, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])

def load(name, r):
    try:
        with open(os.path.join(out, f"{name}.{r}.json")) as f:
            return json.loads(f.read())
    except (OSError, ValueError):
        return None

def field(doc, *path):
    for p in path:
        if not isinstance(doc, dict) or doc.get(p) is None:
            return None
        doc = doc[p]
    return doc

def bad(doc):  # a run that failed or corrupted anything gives no figure
    return doc is None or doc.get("failed", 1) != 0 or doc.get("corrupted", 1) != 0

rows = [  # (row, target, value of one round or None)
    ("page 1 ÷ page 16 (gbps)", "≥ 0.8", lambda r: None if bad(load("page1", r)) or bad(load("page16", r))
        else field(load("page1", r), "gbps") / field(load("page16", r), "gbps")),
    ("tiny c=64 rooms/s, one JVM", "≥ 15,000", lambda r: None if bad(load("tiny64", r)) else field(load("tiny64", r), "rooms_per_s")),
    ("tiny c=64 rooms/s, --processes", "≥ 15,000", lambda r: None if bad(load("tiny64p", r)) else field(load("tiny64p", r), "rooms_per_s")),
    ("tiny c=10000 ÷ c=64, one JVM", "≥ 0.9", lambda r: None if bad(load("tiny64", r)) or bad(load("tiny10000", r))
        else field(load("tiny10000", r), "rooms_per_s") / field(load("tiny64", r), "rooms_per_s")),
    ("tiny c=10000 ÷ c=64, --processes", "≥ 0.9", lambda r: None if bad(load("tiny64p", r)) or bad(load("tiny10000p", r))
        else field(load("tiny10000p", r), "rooms_per_s") / field(load("tiny64p", r), "rooms_per_s")),
    ("tiny c=10000 bytes per in-flight room", "< 4,096", lambda r: None if bad(load("tiny10000", r))
        else field(load("tiny10000", r), "room_memory", "both", "total_bytes_per_room")),
    ("tcp transfer_gbps ÷ iperf3", "≥ 1.0", lambda r: None if bad(load("tcp", r)) else field(load("tcp", r), "ratio_transfer_to_iperf3")),
    ("ucx transfer_gbps ÷ ucx_perftest", "≥ 0.9", lambda r: None if bad(load("ucx", r)) else field(load("ucx", r), "ratio_transfer_to_ucx_perftest")),
    ("shm data path ÷ paired memcpy", "≥ 1.0", lambda r: None if bad(load("shm", r)) else field(load("shm", r), "ratio_datapath_to_paired_memcpy")),
]

def fmt(v):
    return "–" if v is None else (f"{v:,.0f}" if v >= 100 else f"{v:.3f}")

print(f"| target | rounds (raw JSON in {out}) | median | goal |")
print("|---|---|---|---|")
for name, goal, value in rows:
    vals = []
    for r in range(1, rounds + 1):
        try:
            vals.append(value(r))
        except (TypeError, ZeroDivisionError):
            vals.append(None)
    if all(v is None for v in vals):
        continue
    got = [v for v in vals if v is not None]
    print(f"| {name} | {' / '.join(fmt(v) for v in vals)} | {fmt(statistics.median(got))} | {goal} |")
EOF
