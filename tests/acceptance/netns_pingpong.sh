#!/usr/bin/env bash
# Two hosts in two network namespaces joined by a veth pair, RoCEv2 over UDP between them
# (docs/live-mode.md, "Between hosts"):
#   netns_pingpong.sh SOFTHCA_BIN LIB_DIR PROGRAM [PROGRAM OPTIONS...]
# Host "a" (10.<x>.<y>.1) runs the server, host "b" (10.<x>.<y>.2) the client, each through
# `softhca run --link roce --host NAME`, with -g 0 (GID 0: the host's IPv4-mapped address).
# Needs root and iproute2; exits 77 (skipped) when either is missing or namespaces cannot be made.
set -uo pipefail
here=$(dirname "$0")
source "$here/pingpong_lib.sh"

softhca=${1:?usage: $0 SOFTHCA_BIN LIB_DIR PROGRAM [OPTIONS...]}
lib_dir=${2:?}
program=${3:?}
shift 3
[[ -x $program ]] || { echo "SKIP: $program is not installed"; exit 77; }
preload_sanitizer_runtime "$lib_dir"
make_two_namespaces shca

fabric="ns$$"
port=$(pick_port)
out=$(mktemp -d)
run=(env "${run_env[@]}" "$softhca" run --lib-dir "$lib_dir" --fabric "$fabric" --link roce)
timeout 120 ip netns exec "$ns_a" "${run[@]}" --host a -- "$program" -p "$port" -g 0 "$@" \
  >"$out/server" 2>&1 &
pids_to_kill+=("$!")
server=$!
# The server listens inside its namespace: look there.
for _ in $(seq 400); do
  ip netns exec "$ns_a" awk -v p=":$(printf '%04X' "$port")" '$4 == "0A" && $2 ~ p"$" { f = 1 } END { exit !f }' \
    /proc/net/tcp /proc/net/tcp6 2>/dev/null && break
  sleep 0.05
done
timeout 120 ip netns exec "$ns_b" "${run[@]}" --host b -- "$program" -p "$port" -g 0 "$@" "$net.1" \
  >"$out/client" 2>&1
client_rc=$?
wait "$server"
server_rc=$?
echo "--- server on host a (exit $server_rc)"; cat "$out/server"
echo "--- client on host b (exit $client_rc)"; cat "$out/client"
rc=0
for side in server client; do
  var=${side}_rc
  if [[ ${!var} -ne 0 ]]; then echo "FAIL: $side exited ${!var}"; rc=1; fi
  grep -Eq "[0-9]+ bytes in [0-9.]+ seconds" "$out/$side" || { echo "FAIL: $side printed no result"; rc=1; }
done
if ! leftover_shm "$fabric"; then echo "FAIL: shared state left in /dev/shm"; rc=1; fi
rm -rf "$out"
[[ $rc -eq 0 ]] && echo "PASS: $(basename "$program") between namespaces $*"
exit $rc
