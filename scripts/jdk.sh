# Sourced by ./kvferry and ./run-tests: finds a JDK 25+ and exports JAVA_HOME, or explains and fails.
# Order: $JAVA_HOME if it is 25+, then any JDK 25+ under /usr/lib/jvm (newest first).

kvferry_java_major() {
  # Prints the feature version of the java at $1/bin/java, or nothing.
  "$1/bin/java" -XshowSettings:properties -version 2>&1 | awk -F'= ' '/java.specification.version/ {print $2; exit}'
}

kvferry_find_jdk() {
  local candidate major
  if [ -n "${JAVA_HOME:-}" ] && [ -x "$JAVA_HOME/bin/javac" ]; then
    major=$(kvferry_java_major "$JAVA_HOME")
    if [ -n "$major" ] && [ "$major" -ge 25 ] 2>/dev/null; then
      return 0
    fi
  fi
  for candidate in $(ls -d /usr/lib/jvm/*/ 2>/dev/null | sort -rV); do
    candidate=${candidate%/}
    [ -x "$candidate/bin/javac" ] || continue
    major=$(kvferry_java_major "$candidate")
    if [ -n "$major" ] && [ "$major" -ge 25 ] 2>/dev/null; then
      export JAVA_HOME="$candidate"
      return 0
    fi
  done
  echo "kvferry: no JDK 25 or newer found (checked \$JAVA_HOME='${JAVA_HOME:-}' and /usr/lib/jvm/*)." >&2
  echo "kvferry: install one (e.g. Temurin 25) or point JAVA_HOME at it." >&2
  return 1
}

kvferry_find_jdk || exit 1
export PATH="$JAVA_HOME/bin:$PATH"
