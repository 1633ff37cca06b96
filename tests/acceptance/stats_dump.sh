#!/usr/bin/env bash
# SOFTHCA_STATS: a verbs program that moves data leaves a JSON dump of its devices' counters at exit.
#   stats_dump.sh PROGRAM
# Runs PROGRAM (the c_api_smoke conformance program: one RDMA WRITE and one SEND/RECV on
# softhca_0 looped back to itself) with SOFTHCA_STATS set, then checks the file: one device,
# doorbell and CQE-write TLPs counted, packets sent and received, nothing dropped.
set -uo pipefail

program=${1:?usage: $0 PROGRAM}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export SOFTHCA_STATS=$out/stats.json
timeout 60 "$program" > "$out/log" 2>&1 || { cat "$out/log"; echo "FAIL: $program exited $?"; exit 1; }
[[ -s $SOFTHCA_STATS ]] || { echo "FAIL: no stats file written"; exit 1; }

failures=0
expect() {
  grep -Eq -- "$1" "$SOFTHCA_STATS" || { echo "FAIL: $2 (no match for /$1/)"; failures=$((failures + 1)); }
}
expect '"device": "softhca_0"' "the device is named"
expect '"cause": "doorbell"' "doorbells are counted"
expect '"cause": "cqe_write"' "CQE writes are counted"
expect '"cause": "payload_write"' "payload writes are counted"
expect '"sent": [1-9]' "packets were sent"
expect '"received": [1-9]' "packets were received"
expect '"malformed": 0' "no packet was malformed"
if (( failures > 0 )); then
  cat "$SOFTHCA_STATS"
  exit 1
fi
echo "PASS: $SOFTHCA_STATS has the expected counters"
