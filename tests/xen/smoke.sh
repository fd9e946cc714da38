#!/usr/bin/env bash
# Smoke test of the Xen lab: XenStore, vif networking both ways, xl destroy.
# Usage (root): tests/xen/smoke.sh     (same environment variables as lab.sh)
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export LAB_DOM0_DIR=$HERE/smoke/dom0 LAB_DOMU_DIR=$HERE/smoke/domu
export LAB_TIMEOUT=${LAB_TIMEOUT:-300}
exec "$HERE/lab.sh"
