#!/usr/bin/env bash
# RC under faults between two processes (docs/reliability.md, "The soak tests"):
#   rc_soak.sh SOFTHCA_BIN LIB_DIR RC_SOAK OPS_PER_QP
# Runs rc_soak.c's target and initiator as two processes of one host through
# `softhca run --faults` (1% loss, 0.5% duplicates, 1% reorder, 0.1% corruption), 4 RC QPs, and
# checks that both end with every byte and completion as modelled (exit 0), that the counters of
# the stats dump show the faults and the retransmissions that repaired them, and that nothing is
# left in /dev/shm. Every wait is bounded.
set -uo pipefail
here=$(dirname "$0")
source "$here/pingpong_lib.sh"

softhca=${1:?usage: $0 SOFTHCA_BIN LIB_DIR RC_SOAK OPS_PER_QP}
lib_dir=${2:?}
soak=${3:?}
ops=${4:?}
preload_sanitizer_runtime "$lib_dir"

faults="loss=0.01,dup=0.005,reorder=0.01,corrupt=0.001,seed=7"
fabric="soak$$"
out=$(mktemp -d)
run=(env "${run_env[@]}" "$softhca" run --lib-dir "$lib_dir" --fabric "$fabric" --faults "$faults")
rc=0

timeout 120 "${run[@]}" --stats "$out/target.json" -- "$soak" target "$out" "$ops" >"$out/target.log" 2>&1 &
target=$!
pids_to_kill+=("$target")
timeout 120 "${run[@]}" --stats "$out/initiator.json" -- "$soak" initiator "$out" "$ops" >"$out/initiator.log" 2>&1 &
initiator=$!
pids_to_kill+=("$initiator")
wait "$initiator"
irc=$?
wait "$target"
trc=$?
echo "--- initiator (exit $irc)"; cat "$out/initiator.log"
echo "--- target (exit $trc)"; cat "$out/target.log"
((irc == 0)) || { echo "FAIL: the initiator saw a wrong or missing completion"; rc=1; }
((trc == 0)) || { echo "FAIL: the target saw wrong data or receives"; rc=1; }

# Counters: what the faulty links did (each process's port) and what the device (shared by the two
# processes; either dump has it) retransmitted.
sum() {  # sum KEY FILES...: the sum of every "KEY": N in the files
  local key=$1; shift
  cat "$@" 2>/dev/null | grep -o "\"$key\": [0-9]*" | awk '{ s += $2 } END { print s + 0 }'
}
lost=$(sum lost "$out"/*.json)
corrupted=$(sum corrupted "$out"/*.json)
duplicated=$(sum duplicated "$out"/*.json)
reordered=$(sum reordered "$out"/*.json)
retransmitted=$(grep -o '"retransmitted": [0-9]*' "$out/initiator.json" 2>/dev/null | head -1 | awk '{ print $2 + 0 }')
echo "faults: $lost lost, $corrupted corrupted, $duplicated duplicated, $reordered reordered; device: ${retransmitted:-0} packets retransmitted"
((lost > 0 && duplicated > 0 && reordered > 0)) || { echo "FAIL: the links injected no faults"; rc=1; }
((${retransmitted:-0} > 0)) || { echo "FAIL: no retransmission counted"; rc=1; }

if ! leftover_shm "$fabric"; then echo "FAIL: shared state left in /dev/shm"; rc=1; fi
rm -rf "$out"
[[ $rc -eq 0 ]] && echo "PASS: every byte and completion once, in order, through faults"
exit $rc
