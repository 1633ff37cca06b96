#!/usr/bin/env bash
# An unmodified perftest program (Debian perftest 4.5: ib_{write,read,send,atomic}_{bw,lat}) between
# two processes on one host, through `softhca run` (docs/perftest.md):
#   perftest.sh SOFTHCA_BIN LIB_DIR PROGRAM [--link roce] [--stats-check KIND CHECKER]
#               [--expect-refusal TEXT] -- PERFTEST ARGS...
# Starts the server, waits (bounded) until it listens, runs the client against localhost, and
# checks that both exit 0 and print their result table: the "#bytes" header and at least one
# numeric row after it (with -a: one row per size, 2 B to 8 MiB); then that the host's shared state
# is gone. Exits 77 (skipped) when the program is not installed.
#   --stats-check KIND CHECKER: both sides run with `softhca run --stats` and CHECKER (the
#     perftest_stats_check program) checks the sum of their PCIe counters (the host device's)
#     against KIND for the WQEs the client posted (-n per QP, times -q).
#   --expect-refusal TEXT: perftest itself refuses the options: both sides must exit non-zero and
#     print TEXT (no server ever listens).
set -uo pipefail
here=$(dirname "$0")
source "$here/pingpong_lib.sh"
source "$here/perftest_lib.sh"

usage="usage: $0 SOFTHCA_BIN LIB_DIR PROGRAM [--link roce] [--stats-check KIND CHECKER] [--expect-refusal TEXT] -- ARGS..."
softhca=${1:?$usage}
lib_dir=${2:?$usage}
program=${3:?$usage}
shift 3
link=() stats_kind="" checker="" refusal=""
while (($# > 0)) && [[ $1 != -- ]]; do
  case $1 in
    --link) link=(--link "$2"); shift 2 ;;
    --stats-check) stats_kind=$2; checker=$3; shift 3 ;;
    --expect-refusal) refusal=$2; shift 2 ;;
    *) echo "$usage"; exit 2 ;;
  esac
done
[[ ${1:-} == -- ]] && shift
[[ -x $program ]] || { echo "SKIP: $program is not installed"; exit 77; }
preload_sanitizer_runtime "$lib_dir"

perftest_parse_args "$program" "$@"
# An -a latency run took up to 86 s on our loaded 2-core machine (docs/perftest.md, "Cost").
readonly run_timeout=240

fabric="pt$$"
port=$(pick_port)
run=(env "${run_env[@]}" "$softhca" run --lib-dir "$lib_dir" --fabric "$fabric" "${link[@]}")
out=$(mktemp -d)
server_stats=() client_stats=()
if [[ -n $stats_kind ]]; then
  server_stats=(--stats "$out/server.json")
  client_stats=(--stats "$out/client.json")
fi

timeout "$run_timeout" "${run[@]}" "${server_stats[@]}" -- "$program" -p "$port" "$@" >"$out/server" 2>&1 &
server=$!
pids_to_kill+=("$server")
if [[ -z $refusal ]] && ! wait_listening "$port" 20 "$server"; then
  echo "FAIL: the server never listened on port $port"
  cat "$out/server"
  exit 1
fi
timeout "$run_timeout" "${run[@]}" "${client_stats[@]}" -- "$program" -p "$port" "$@" localhost \
  >"$out/client" 2>&1
client_rc=$?
wait "$server"
server_rc=$?

echo "--- server (exit $server_rc)"; cat "$out/server"
echo "--- client (exit $client_rc)"; cat "$out/client"

rc=0
for side in server client; do
  var=${side}_rc
  if [[ -n $refusal ]]; then
    if [[ ${!var} -eq 0 ]]; then echo "FAIL: $side accepted options perftest refuses"; rc=1; fi
    grep -qF -- "$refusal" "$out/$side" || { echo "FAIL: $side did not print \"$refusal\""; rc=1; }
    continue
  fi
  perftest_check_side "$program" "$side" "${!var}" "$out/$side" || rc=1
done
if [[ -n $stats_kind ]]; then
  if ! timeout 30 "$checker" "$stats_kind" $((perftest_iters * perftest_qps)) "$out/server.json" "$out/client.json"; then
    echo "FAIL: the host device's counters do not show $stats_kind"; rc=1
  fi
fi
if ! leftover_shm "$fabric"; then echo "FAIL: shared state left in /dev/shm"; rc=1; fi
rm -rf "$out"
[[ $rc -eq 0 ]] && echo "PASS: $(basename "$program") $*"
exit $rc
