#!/usr/bin/env bash
# The reference suite resolves Apache Kafka with Maven (from Maven Central, once).
set -euo pipefail
if ! command -v mvn >/dev/null 2>&1; then
  echo "Maven is required to fetch Apache Kafka for the reference suite but no 'mvn' was found. Install it (Debian: apt-get install maven)." >&2
  exit 1
fi
echo "$(mvn -v 2>/dev/null | head -1 | sed 's/\x1b\[[0-9;]*m//g'): ok for the reference project"
