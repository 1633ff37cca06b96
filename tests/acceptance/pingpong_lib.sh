# Helpers for acceptance tests that run unmodified verbs programs as two peers through
# `softhca run` (sourced, not run). Every wait is bounded; every process started is killed on exit.

# A sanitizer build of our library needs its runtime loaded first in uninstrumented programs.
# Only those programs get it (run_env, for `env`): tools like pkill hang with libasan preloaded.
run_env=()
preload_sanitizer_runtime() {
  local lib_dir=$1 runtime
  for runtime in libasan libtsan; do
    if readelf -d "$lib_dir/libibverbs.so.1" | grep -q "NEEDED.*\[$runtime\.so"; then
      run_env=("LD_PRELOAD=$(gcc -print-file-name="$runtime.so")" "ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0}")
    fi
  done
}

# need PROGRAM...: (a name or a path) exits 77 (skipped) when one is missing, except in CI, which
# installs them all (.ci/packages.txt): there a missing program fails the test.
need() {
  local p
  for p in "$@"; do
    command -v "$p" >/dev/null && continue
    [[ ${CI:-} == true ]] && { echo "FAIL: $p is not installed (.ci/packages.txt)"; exit 1; }
    echo "SKIP: $p is not installed"
    exit 77
  done
}

# A TCP port for the programs' out-of-band exchange, distinct per test run.
pick_port() {
  echo $((20000 + ($$ * 7 + RANDOM) % 40000))
}

# wait_listening PORT SECONDS [PID]: waits until something listens on TCP PORT (from /proc/net/tcp*,
# so no tool is needed and no connection is made). 0 when it does, 1 on timeout, or at once when
# process PID (the server that should listen) has exited.
wait_listening() {
  local hex deadline
  hex=$(printf '%04X' "$1")
  deadline=$((SECONDS + $2))
  while ((SECONDS < deadline)); do
    if [[ -n ${3:-} ]] && ! kill -0 "$3" 2>/dev/null; then
      echo "the server (pid $3) exited before it listened on port $1"
      return 1
    fi
    if awk -v p=":$hex" '$4 == "0A" && $2 ~ p"$" { found = 1 } END { exit !found }' \
        /proc/net/tcp /proc/net/tcp6 2>/dev/null; then
      return 0
    fi
    sleep 0.05
  done
  return 1
}

pids_to_kill=()
kill_started() {
  local p
  [[ $BASHPID == "$$" ]] || return 0  # not in subshells (command substitutions run this trap)
  for p in "${pids_to_kill[@]}"; do kill -9 "$p" 2>/dev/null; done
  wait 2>/dev/null
}
trap kill_started EXIT

# No host segment (<fabric>@<host>) or fabric registry (<fabric>.hosts) of FABRIC may be left in
# the user's directory /dev/shm/softhca-<euid> once its processes are gone (docs/live-mode.md).
# Prints what is left; 0 when nothing is.
leftover_shm() {
  local fabric=$1 dir f left=""
  dir="/dev/shm/softhca-$(id -u)"
  for f in "$dir/$fabric.hosts" "$dir/$fabric@"*; do
    if [[ -e $f || -L $f ]]; then left+="$f"$'\n'; fi
  done
  [[ -z $left ]] && return 0
  printf '%s' "$left"
  return 1
}

# make_two_namespaces PREFIX: two network namespaces joined by a veth pair, as two hosts of one
# subnet. Sets ns_a, ns_b (names) and net (the first three octets; host a is $net.1, b is $net.2),
# removes both on exit (with every process started). Exits 77 (skipped) when not root, when
# iproute2 is missing or when this kernel or container cannot create namespaces; 1 when the veth
# pair cannot be set up.
make_two_namespaces() {
  local prefix=$1 tag
  [[ $(id -u) -eq 0 ]] || { echo "SKIP: network namespaces need root"; exit 77; }
  command -v ip >/dev/null || { echo "SKIP: iproute2 (ip) is not installed"; exit 77; }
  tag=$(( $$ % 60000 ))
  ns_a="${prefix}${tag}a"; ns_b="${prefix}${tag}b"
  net="10.$(( 100 + tag / 250 % 100 )).$(( tag % 250 ))"
  trap cleanup_namespaces EXIT
  if ! ip netns add "$ns_a" 2>/dev/null || ! ip netns add "$ns_b" 2>/dev/null; then
    echo "SKIP: cannot create network namespaces here"
    exit 77
  fi
  local va="v${prefix}${tag}a" vb="v${prefix}${tag}b"
  ip link add "$va" netns "$ns_a" type veth peer name "$vb" netns "$ns_b" || exit 1
  ip -n "$ns_a" addr add "$net.1/24" dev "$va" && ip -n "$ns_a" link set "$va" up &&
    ip -n "$ns_a" link set lo up || exit 1
  ip -n "$ns_b" addr add "$net.2/24" dev "$vb" && ip -n "$ns_b" link set "$vb" up &&
    ip -n "$ns_b" link set lo up || exit 1
}
cleanup_namespaces() {
  kill_started
  ip netns del "$ns_a" 2>/dev/null
  ip netns del "$ns_b" 2>/dev/null
}
