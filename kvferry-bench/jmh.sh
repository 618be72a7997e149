#!/usr/bin/env bash
# Runs every JMH microbenchmark of the hot paths in one JMH run:
#   kvferry-bench's io.kvferry.bench.jmh (frame codec, planner, head-slice gather), and
#   kvferry-core's test-source benchmarks of package-private code (write gate, room status table, room change feed).
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
# JMH merges every META-INF/BenchmarkList on the class path: kvferry-bench's (in its jar under lib/) and
# kvferry-core's test classes', whose benchmarks share the library's packages and so reach its package-private classes.
"${JAVA[@]}" -cp "kvferry-core/target/test-classes:kvferry-cli/target/lib/*" org.openjdk.jmh.Main "${ARGS[@]}"
