#!/usr/bin/env bash
# A peer killed with SIGKILL mid-transfer (docs/live-mode.md, "Processes that die"):
#   sigkill.sh SOFTHCA_BIN LIB_DIR RC_STREAM
# Streams RDMA WRITEs between two processes of one host (rc_stream.c), kills the target with
# SIGKILL while writes are in flight, and checks that the sender
#   - ends on its own within its configured timeout (timeout 14 = 67 ms per try, retry_cnt 7: about
#     half a second; we allow 20 s),
#   - reports IBV_WC_RETRY_EXC_ERR and exits on it (no crash, no hang);
# then that a new pair (unmodified ibv_rc_pingpong) completes on the same fabric, and that no
# shared state is left behind.
# Exits 77 (skipped) when ibverbs-utils is not installed.
set -uo pipefail
here=$(dirname "$0")
source "$here/pingpong_lib.sh"

softhca=${1:?usage: $0 SOFTHCA_BIN LIB_DIR RC_STREAM}
lib_dir=${2:?}
stream=${3:?}
program=/usr/bin/ibv_rc_pingpong
[[ -x $program ]] || { echo "SKIP: $program is not installed"; exit 77; }
preload_sanitizer_runtime "$lib_dir"

fabric="kill$$"
run=(env "${run_env[@]}" "$softhca" run --lib-dir "$lib_dir" --fabric "$fabric" --)
out=$(mktemp -d)
rc=0

# ---- a stream of RDMA WRITEs, and its target killed mid-transfer --------------------------------
timeout 120 "${run[@]}" "$stream" target "$out" >"$out/target.log" 2>&1 &
target=$!
pids_to_kill+=("$target")
timeout 120 "${run[@]}" "$stream" sender "$out" 0 >"$out/sender.log" 2>&1 &
sender=$!
pids_to_kill+=("$sender")
# Wait (bounded) until both are connected, then a little longer so writes are in flight.
for _ in $(seq 200); do
  grep -q connected "$out/sender.log" 2>/dev/null && grep -q connected "$out/target.log" 2>/dev/null && break
  sleep 0.05
done
sleep 0.5
# Kill the program itself (not the `timeout` wrapping it), found by its unique arguments.
pkill -9 -f -- "$stream target $out" || { echo "FAIL: no target process to kill"; exit 1; }
t0=$SECONDS
wait "$sender"
sender_rc=$?
elapsed=$((SECONDS - t0))
echo "--- target (killed)"; cat "$out/target.log"
echo "--- sender (exit $sender_rc after ${elapsed}s)"; cat "$out/sender.log"
if ((sender_rc != 2)); then
  echo "FAIL: the sender should end on an error completion (exit 2), got exit $sender_rc"; rc=1
fi
if ! grep -q "error status 12 (transport retry counter exceeded)" "$out/sender.log"; then
  echo "FAIL: the sender reported no retry-exceeded completion"; rc=1
fi
if ((elapsed > 20)); then echo "FAIL: the sender took ${elapsed}s to see the error"; rc=1; fi
wait "$target" 2>/dev/null

# ---- a new pair on the same fabric --------------------------------------------------------------
port=$(pick_port)
timeout 60 "${run[@]}" "$program" -p "$port" -n 1000 >"$out/server2" 2>&1 &
server=$!
pids_to_kill+=("$server")
wait_listening "$port" 20 || { echo "FAIL: second server never listened"; cat "$out/server2"; exit 1; }
timeout 60 "${run[@]}" "$program" -p "$port" -n 1000 localhost >"$out/client2" 2>&1
c2=$?
wait "$server"
s2=$?
echo "--- second pair: server exit $s2, client exit $c2"; cat "$out/server2" "$out/client2"
if ((c2 != 0 || s2 != 0)); then echo "FAIL: the second pair failed"; rc=1; fi

if ! leftover_shm "$fabric"; then echo "FAIL: shared state left in /dev/shm"; rc=1; fi
rm -rf "$out"
[[ $rc -eq 0 ]] && echo "PASS: survivor saw the error, a new pair ran, nothing leaked"
exit $rc
