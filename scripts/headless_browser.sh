#!/usr/bin/env bash
# Print the path of a Chromium that can run headless (tests/unit/report/test_report.py renders the HTML report with it),
# installing Debian's `chromium` package when there is none and this runs as root with apt-get (as CI does).
# Exit 1, with the reason on stderr, when there is none and it cannot install one.
set -euo pipefail
for name in chromium chromium-browser google-chrome; do
  if command -v "$name" >/dev/null 2>&1; then command -v "$name"; exit 0; fi
done
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "no chromium on PATH; installing one needs root and apt-get (Debian/Ubuntu: apt-get install chromium)" >&2
  exit 1
fi
DEBIAN_FRONTEND=noninteractive apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null
command -v chromium
