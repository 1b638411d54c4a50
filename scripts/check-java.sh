#!/usr/bin/env bash
# PySpark 4 needs Java 17 or newer on PATH (or in JAVA_HOME).
set -euo pipefail
java_bin="${JAVA_HOME:+$JAVA_HOME/bin/}java"
if ! command -v "$java_bin" >/dev/null 2>&1; then
  echo "Java 17+ is required for PySpark but no 'java' was found. Install it (Debian: apt-get install openjdk-17-jre-headless) or set JAVA_HOME." >&2
  exit 1
fi
version=$("$java_bin" -version 2>&1 | awk -F'"' '/version/ {print $2; exit}')
major=${version%%.*}
if [ "$major" = "1" ]; then major=$(echo "$version" | cut -d. -f2); fi
if [ "${major:-0}" -lt 17 ]; then
  echo "Java $version found; PySpark needs Java 17 or newer." >&2
  exit 1
fi
echo "java $version: ok for PySpark"
