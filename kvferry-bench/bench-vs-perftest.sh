#!/usr/bin/env bash
# Put bandwidth of kvferry's ucx DataPath (UcxPutBench) against ucx_perftest -t ucp_put_bw, same
# UCX_TLS, same message size, same error-handling mode, both as two processes on this host,
# interleaved and repeated; prints medians and the ratio.
#   kvferry-ucx/bench-vs-perftest.sh                      # defaults below
#   TLS_LIST="tcp posix,cma" SIZES="65536 1048576" REPS=5 kvferry-bench/bench-vs-perftest.sh
# Needs: ucx-utils (ucx_perftest), a JDK 25 (JAVA_HOME), and `mvn package` of kvferry-ucx.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
JAVA="${JAVA_HOME:-/usr/lib/jvm/temurin-25-jdk-amd64}/bin/java"
CP="$ROOT/kvferry-cli/target/lib/*"  # kvferry-bench and its dependencies (mvn package copies them there)
TLS_LIST="${TLS_LIST:-tcp posix,cma default}"
MODES="${MODES:-none peer}"
SIZES="${SIZES:-65536 1048576 4194304}"
REPS="${REPS:-3}"
PORT="${PORT:-13500}"
# Medians (and the ratio of the best runs: this host's 2 cores may be shared with other work).
# Extra environment for ucx_perftest only. ucx_perftest allocates its buffers through UCX, which
# prefers sysv/posix shared segments (UCX_ALLOC_PRIO=md:sysv,md:posix,...): on one host its puts
# then become memcpys into a mapped segment. kvferry's pools are private memory, which UCX can only
# reach with cma (or tcp). PERFTEST_ENV="UCX_ALLOC_PRIO=mmap,heap" makes perftest's buffers private
# too, so both sides measure the same transport.
PERFTEST_ENV="${PERFTEST_ENV:-}"
# bytes moved per run: enough for a couple of seconds on each transport class
bytes_for() { case "$1" in tcp) echo $((2 << 30));; *) echo $((16 << 30));; esac; }

median() { sort -g | awk '{a[NR]=$1} END {if (NR==0) print "nan"; else if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

tls_env() { if [ "$1" = default ]; then echo "-u UCX_TLS"; else echo "UCX_TLS=$1"; fi; }

perftest_once() { # tls mode size iters port -> overall MB/s (MB = 2^20)
  local e=""; [ "$2" = peer ] && e="-e"
  local PORT=$5
  env $(tls_env "$1") $PERFTEST_ENV ucx_perftest -t ucp_put_bw -s "$3" -n "$4" -w $(($4 / 10 + 1)) $e -p $PORT >/dev/null 2>&1 &
  local srv=$!
  sleep 1
  local out
  out=$(env $(tls_env "$1") $PERFTEST_ENV timeout 300 ucx_perftest 127.0.0.1 -p $PORT -t ucp_put_bw -s "$3" -n "$4" -w $(($4 / 10 + 1)) $e -f 2>/dev/null \
        | awk '$1 ~ /^[0-9]+$/ && NF >= 8 {bw=$6} END {print bw}') || true
  ( sleep 10; kill $srv 2>/dev/null ) &
  wait $srv 2>/dev/null || true
  echo "${out:-nan}"
}

bench_once() { # tls mode size iters port -> MB/s (MB = 2^20)
  local PORT=$5
  env $(tls_env "$1") KVFERRY_UCX_ERR_MODE="$2" "$JAVA" --enable-native-access=ALL-UNNAMED -cp "$CP" io.kvferry.bench.ucx.UcxPutBench \
      --server $PORT --size "$3" >/dev/null 2>&1 &
  local srv=$!
  sleep 1.5
  local out
  out=$(env $(tls_env "$1") KVFERRY_UCX_ERR_MODE="$2" timeout 300 "$JAVA" --enable-native-access=ALL-UNNAMED -cp "$CP" \
        io.kvferry.bench.ucx.UcxPutBench --client 127.0.0.1:$PORT --size "$3" --iters "$4" --json 2>/dev/null \
        | grep '^{' | sed -E 's/.*"mib_per_s":([0-9.]+).*"verified":(true|false).*/\1 \2/') || true
  ( sleep 10; kill $srv 2>/dev/null ) &   # a server whose client never came
  wait $srv 2>/dev/null || true
  case "$out" in *" true") echo "${out% true}";; *) echo nan;; esac
}

maxof() { sort -g | tail -1; }
printf "%-10s %-5s %9s %14s %14s %7s %9s\n" UCX_TLS mode size perftest_MB/s kvferry_MB/s ratio max_ratio
for tls in $TLS_LIST; do
  for mode in $MODES; do
    for size in $SIZES; do
      iters=$(( $(bytes_for "$tls") / size ))
      p=(); k=()
      for r in $(seq "$REPS"); do
        PORT=$((PORT + 2))   # a fresh port per run (command substitutions cannot update PORT)
        p+=("$(perftest_once "$tls" "$mode" "$size" "$iters" $PORT)")
        k+=("$(bench_once "$tls" "$mode" "$size" "$iters" $((PORT + 1)))")
      done
      pm=$(printf "%s\n" "${p[@]}" | { grep -v nan || true; } | median)
      km=$(printf "%s\n" "${k[@]}" | { grep -v nan || true; } | median)
      px=$(printf "%s\n" "${p[@]}" | { grep -v nan || true; } | maxof)
      kx=$(printf "%s\n" "${k[@]}" | { grep -v nan || true; } | maxof)
      ratio=$(awk -v a="$km" -v b="$pm" 'BEGIN { if (a == "nan" || b == "nan" || a == "" || b == "" || b + 0 == 0) print "-"; else printf "%.2f", a / b }')
      xratio=$(awk -v a="$kx" -v b="$px" 'BEGIN { if (a == "" || b == "" || b + 0 == 0) print "-"; else printf "%.2f", a / b }')
      printf "%-10s %-5s %9s %14s %14s %7s %9s   perftest=[%s] kvferry=[%s]\n" "$tls" "$mode" "$size" "$pm" "$km" "$ratio" "$xratio" "${p[*]}" "${k[*]}"
    done
  done
done
