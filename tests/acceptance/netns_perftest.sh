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
[[ $(id -u) -eq 0 ]] || { echo "SKIP: network namespaces need root"; exit 77; }
command -v ip >/dev/null || { echo "SKIP: iproute2 (ip) is not installed"; exit 77; }
preload_sanitizer_runtime "$lib_dir"
perftest_parse_args "$program" "$@"

tag=$(( $$ % 60000 ))
ns_a="shpt${tag}a"; ns_b="shpt${tag}b"
net="10.$(( 100 + tag / 250 % 100 )).$(( tag % 250 ))"
cleanup_ns() {
  kill_started
  ip netns del "$ns_a" 2>/dev/null
  ip netns del "$ns_b" 2>/dev/null
}
trap cleanup_ns EXIT
if ! ip netns add "$ns_a" 2>/dev/null || ! ip netns add "$ns_b" 2>/dev/null; then
  echo "SKIP: cannot create network namespaces here"
  exit 77
fi
ip link add "vpt${tag}a" netns "$ns_a" type veth peer name "vpt${tag}b" netns "$ns_b" || exit 1
ip -n "$ns_a" addr add "$net.1/24" dev "vpt${tag}a" && ip -n "$ns_a" link set "vpt${tag}a" up &&
  ip -n "$ns_a" link set lo up || exit 1
ip -n "$ns_b" addr add "$net.2/24" dev "vpt${tag}b" && ip -n "$ns_b" link set "vpt${tag}b" up &&
  ip -n "$ns_b" link set lo up || exit 1

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
