#!/usr/bin/env bash
# An unmodified perftest program between two hosts in two network namespaces joined by a veth
# pair, RoCEv2 over UDP between them (docs/perftest.md; the set-up of netns_pingpong.sh):
#   netns_perftest.sh SOFTHCA_BIN LIB_DIR PROGRAM [PERFTEST ARGS...]
# Host "a" (10.<x>.<y>.1) runs the server, host "b" (10.<x>.<y>.2) the client, each through
# `softhca run --link roce --host NAME`, with -x 0 (GID 0: the host's IPv4-mapped address). Both
# must exit 0 and print their result table. Needs root and iproute2; exits 77 (skipped) when either
# is missing or namespaces cannot be made.
set -uo pipefail
here=$(dirname "$0")
source "$here/pingpong_lib.sh"
source "$here/perftest_lib.sh"

softhca=${1:?usage: $0 SOFTHCA_BIN LIB_DIR PROGRAM [OPTIONS...]}
lib_dir=${2:?}
program=${3:?}
shift 3
[[ -x $program ]] || { echo "SKIP: $program is not installed"; exit 77; }
preload_sanitizer_runtime "$lib_dir"
perftest_parse_args "$program" "$@"
make_two_namespaces shpt

readonly run_timeout=120
fabric="nspt$$"
port=$(pick_port)
out=$(mktemp -d)
run=(env "${run_env[@]}" "$softhca" run --lib-dir "$lib_dir" --fabric "$fabric" --link roce)
timeout "$run_timeout" ip netns exec "$ns_a" "${run[@]}" --host a -- "$program" -p "$port" -x 0 "$@" \
  >"$out/server" 2>&1 &
server=$!
pids_to_kill+=("$server")
# The server listens inside its namespace: look there (bounded: 20 s).
listening=0
for _ in $(seq 400); do
  if ip netns exec "$ns_a" awk -v p=":$(printf '%04X' "$port")" '$4 == "0A" && $2 ~ p"$" { f = 1 } END { exit !f }' \
      /proc/net/tcp /proc/net/tcp6 2>/dev/null; then
    listening=1
    break
  fi
  sleep 0.05
done
if ((listening == 0)); then
  echo "FAIL: the server never listened on port $port"
  cat "$out/server"
  exit 1
fi
timeout "$run_timeout" ip netns exec "$ns_b" "${run[@]}" --host b -- "$program" -p "$port" -x 0 "$@" "$net.1" \
  >"$out/client" 2>&1
client_rc=$?
wait "$server"
server_rc=$?
echo "--- server on host a (exit $server_rc)"; cat "$out/server"
echo "--- client on host b (exit $client_rc)"; cat "$out/client"
rc=0
perftest_check_side "$program" server "$server_rc" "$out/server" || rc=1
perftest_check_side "$program" client "$client_rc" "$out/client" || rc=1
if ! leftover_shm "$fabric"; then echo "FAIL: shared state left in /dev/shm"; rc=1; fi
rm -rf "$out"
[[ $rc -eq 0 ]] && echo "PASS: $(basename "$program") between namespaces $*"
exit $rc
