#!/usr/bin/env bash
# An unmodified ibverbs-utils pingpong program between two processes on one host, through
# `softhca run` (docs/live-mode.md):
#   pingpong.sh SOFTHCA_BIN LIB_DIR PROGRAM [PROGRAM OPTIONS...]
# Starts the server, waits (bounded) until it listens, runs the client against localhost, and
# checks that both exit 0 and print their "bytes in ... seconds" result lines; then that the
# host's shared state is gone. Exits 77 (skipped) when the program is not installed.
set -uo pipefail
here=$(dirname "$0")
source "$here/pingpong_lib.sh"

softhca=${1:?usage: $0 SOFTHCA_BIN LIB_DIR PROGRAM [OPTIONS...]}
lib_dir=${2:?}
program=${3:?}
shift 3
[[ -x $program ]] || { echo "SKIP: $program is not installed"; exit 77; }
preload_sanitizer_runtime "$lib_dir"

readonly run_timeout=120
fabric="pp$$"
port=$(pick_port)
run=(env "${run_env[@]}" "$softhca" run --lib-dir "$lib_dir" --fabric "$fabric" --)
out=$(mktemp -d)

timeout "$run_timeout" "${run[@]}" "$program" -p "$port" "$@" >"$out/server" 2>&1 &
server=$!
pids_to_kill+=("$server")
if ! wait_listening "$port" 20 "$server"; then
  echo "FAIL: the server never listened on port $port"
  cat "$out/server"
  exit 1
fi
timeout "$run_timeout" "${run[@]}" "$program" -p "$port" "$@" localhost >"$out/client" 2>&1
client_rc=$?
wait "$server"
server_rc=$?

echo "--- server (exit $server_rc)"; cat "$out/server"
echo "--- client (exit $client_rc)"; cat "$out/client"
rc=0
for side in server client; do
  var=${side}_rc
  if [[ ${!var} -ne 0 ]]; then echo "FAIL: $side exited ${!var}"; rc=1; fi
  if ! grep -Eq "[0-9]+ bytes in [0-9.]+ seconds" "$out/$side"; then
    echo "FAIL: $side printed no result line"; rc=1
  fi
done
if ! leftover_shm "$fabric"; then echo "FAIL: shared state left in /dev/shm"; rc=1; fi
rm -rf "$out"
[[ $rc -eq 0 ]] && echo "PASS: $(basename "$program") $*"
exit $rc
