#!/usr/bin/env bash
# The fleet page at 1,000 nodes in headless Chromium, fed a generated coordinator status
# (fleet_page_scale.py, fleet_status_fixture.py), and `weightcast status --from` on the same
# status; no fleet runs. SCREENSHOT_OUT=FILE keeps a screenshot. Skips (77) with a message where
# Chromium is not installed.
#   tests/integration/fleet_page_scale.sh WEIGHTCAST_BINARY
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
browser="$(command -v chromium || command -v chromium-browser || true)"
if [[ -z "$browser" ]]; then
  echo "SKIP fleet_page_scale: chromium is not installed (apt-get install chromium)"
  exit 77
fi
exec timeout 300 python3 "$here/fleet_page_scale.py" "$browser" "$here/../../src/coord/fleet_page.html" \
  "$1" ${SCREENSHOT_OUT:+"$SCREENSHOT_OUT"}
