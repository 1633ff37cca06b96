#!/usr/bin/env bash
# Unmodified Debian ibv_asyncwatch sees its port go down and up (docs/events.md):
#   asyncwatch.sh SOFTHCA_BIN LIB_DIR
# Starts `softhca run -- ibv_asyncwatch` on a fabric of its own, sets the host's port down with
# `softhca port down` (ibv_devinfo then says PORT_DOWN) and up again, and checks that
# ibv_asyncwatch printed IBV_EVENT_PORT_ERR, then IBV_EVENT_PORT_ACTIVE, for port 1, once each.
# ibv_asyncwatch waits for ever: it is killed, and a later process of the host reclaims its slot,
# so nothing is left in /dev/shm. Exits 77 (skipped) when ibverbs-utils is not installed.
set -uo pipefail

softhca=${1:?usage: $0 SOFTHCA_BIN LIB_DIR}
lib_dir=${2:?usage: $0 SOFTHCA_BIN LIB_DIR}
watch=/usr/bin/ibv_asyncwatch
devinfo=/usr/bin/ibv_devinfo
if [[ ! -x $watch || ! -x $devinfo ]]; then
  echo "SKIP: ibverbs-utils ($watch, $devinfo) is not installed"
  exit 77
fi
here=$(cd "$(dirname "$0")" && pwd)
source "$here/pingpong_lib.sh"
preload_sanitizer_runtime "$lib_dir"

fabric="asyncwatch$$"
out=$(mktemp -d)
trap 'kill_started; rm -rf "$out"' EXIT
failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}
# wait_for REGEX: until ibv_asyncwatch's output has a line matching it (10 s at most).
wait_for() {
  local i
  for ((i = 0; i < 1000; ++i)); do
    grep -Eq -- "$1" "$out/watch.log" && return 0
    sleep 0.01
  done
  return 1
}

env "${run_env[@]}" "$softhca" run --fabric "$fabric" -- "$watch" >"$out/watch.log" 2>&1 &
watcher=$!
pids_to_kill+=("$watcher")
wait_for 'async event FD' || fail "ibv_asyncwatch did not start"

"$softhca" port down --fabric "$fabric" || fail "softhca port down exited $?"
wait_for 'IBV_EVENT_PORT_ERR \(10\), port 1' || fail "no PORT_ERR for port 1"
state=$(env "${run_env[@]}" "$softhca" run --fabric "$fabric" -- "$devinfo" 2>&1)
grep -Eq 'state:[[:space:]]+PORT_DOWN' <<<"$state" || fail "ibv_devinfo does not say PORT_DOWN: $state"
"$softhca" port up --fabric "$fabric" || fail "softhca port up exited $?"
wait_for 'IBV_EVENT_PORT_ACTIVE \(9\), port 1' || fail "no PORT_ACTIVE for port 1"

kill -9 "$watcher" 2>/dev/null
wait "$watcher" 2>/dev/null
echo "--- ibv_asyncwatch"
cat "$out/watch.log"
events=$(grep -c 'event_type' "$out/watch.log")
[[ $events -eq 2 ]] || fail "ibv_asyncwatch printed $events events, not 2"
grep -A1 'PORT_ERR' "$out/watch.log" | grep -q 'PORT_ACTIVE' || fail "PORT_ACTIVE did not follow PORT_ERR"

# The killed watcher's slot is reclaimed by the next process of the host, which leaves nothing.
env "${run_env[@]}" "$softhca" run --fabric "$fabric" -- /usr/bin/ibv_devices >/dev/null 2>&1
if ! leftover_shm "$fabric"; then fail "shared state left in /dev/shm"; fi

((failures == 0)) && echo "PASS" || echo "$failures failure(s)"
((failures == 0))
