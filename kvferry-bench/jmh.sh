#!/usr/bin/env bash
# Runs every JMH microbenchmark of the hot paths, in two passes (JMH reads one benchmark list per class path):
#   1. kvferry-bench's io.kvferry.bench.jmh (frame codec, planner, head-slice gather), from the CLI's class path;
#   2. kvferry-core's test-source benchmarks of package-private code (write gate, room status table).
# Usage: kvferry-bench/jmh.sh [JMH options, e.g. -f 1 -wi 2 -i 3 -w 1 -r 1, or a regex to pick benchmarks]
# Default options: one fork, 2 x 1 s warm-up, 3 x 1 s measurement (indications on a shared machine, not a verdict).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/jdk.sh"
cd "$ROOT"
# -DskipTests still compiles the test sources (kvferry-core's benchmarks and their generated JMH classes).
mvn -q -B -Dstyle.color=never package -DskipTests -Dcheckstyle.skip=true >&2
ARGS=("$@")
[ "${#ARGS[@]}" -gt 0 ] || ARGS=(-f 1 -wi 2 -i 3 -w 1 -r 1)
JAVA=("$JAVA_HOME/bin/java" --enable-native-access=ALL-UNNAMED)
echo "== kvferry-bench: io.kvferry.bench.jmh" >&2
"${JAVA[@]}" -cp "kvferry-cli/target/lib/*" org.openjdk.jmh.Main "${ARGS[@]}"
echo "== kvferry-core (test sources): io.kvferry.decode.WriteGateBench, io.kvferry.session.RoomStatusTableBench" >&2
# The test classes first: their META-INF/BenchmarkList is the one JMH reads; the same packages as the
# library's jar, so the benchmarks reach its package-private classes.
"${JAVA[@]}" -cp "kvferry-core/target/test-classes:kvferry-cli/target/lib/*" org.openjdk.jmh.Main "${ARGS[@]}"
