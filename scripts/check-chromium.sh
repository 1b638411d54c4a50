#!/usr/bin/env bash
# The console's browser tests (tests/integration/test_console.py) drive Debian's chromium through
# Playwright, never a browser of Playwright's own (no "playwright install"): make sure it is there,
# installing it with apt-get when we are root or sudo needs no password.
set -euo pipefail
chromium=/usr/bin/chromium
how="Debian's chromium is required at $chromium for the console's browser tests; install it with: sudo apt-get install --no-install-recommends chromium"

if [ -x "$chromium" ]; then
  echo "chromium at $chromium: ok for the console tests"
  exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
  as_root=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  as_root=(sudo -n)
else
  echo "$how" >&2
  exit 1
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "$how (no apt-get here: install Chromium so that $chromium runs it)" >&2
  exit 1
fi

apt=(${as_root[@]+"${as_root[@]}"} env DEBIAN_FRONTEND=noninteractive apt-get)
echo "chromium is missing at $chromium: installing it with apt-get" >&2
# The package lists may be recent enough already; update them only when the install needs it.
if ! "${apt[@]}" install -y --no-install-recommends chromium; then
  "${apt[@]}" update && "${apt[@]}" install -y --no-install-recommends chromium || true
fi
if [ ! -x "$chromium" ]; then
  echo "$how (apt-get could not install it)" >&2
  exit 1
fi
echo "chromium at $chromium: installed"
