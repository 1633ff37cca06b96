#!/usr/bin/env bash
# An unmodified Debian program that uses rdma_cm (rdmacm-utils, perftest -R, qperf -cm1) between
# two processes on one host, through `softhca run`, on softhca's librdmacm.so.1 and libibverbs.so.1
# (docs/rdma-cm-programs.md; call sequences and success lines: rdmacm.md §5):
#   rdmacm.sh SOFTHCA_BIN LIB_DIR [--link roce] [--two-hosts] [--listening SHIM] CASE [ARGS...]
# --two-hosts: the server runs on host b, the client on host a of the run's fabric (over the UDP
# carrier), and the client names b by the address `softhca hosts --host b` gives (docs/addresses.md)
# instead of 127.0.0.1; it needs the shim (--listening), since b's address exists once b runs.
# CASE (the server is started first, the client against 127.0.0.1):
#   rping                  rping -s -a 0.0.0.0 -p P / rping -c -a 127.0.0.1 -p P -C 100 -V -v:
#                          every "ping data: rdma-ping-N" line, N = 0..99, both exit 0
#   rping_rejected         rping -c -a 127.0.0.1 -p P -C 1 with nobody listening on P: exits
#                          non-zero with "RDMA_CM_EVENT_REJECTED, error 8" (the device answers REJ 8)
#   ucmatose               ucmatose -c 8 -p P / ucmatose -s 127.0.0.1 -c 8 -p P: the success lines
#   udaddy                 udaddy / udaddy -s 127.0.0.1 (UD, SIDR): the success lines
#   rdma_server            rdma_server -p P / rdma_client -s 127.0.0.1 -p P: "...: end 0"
#   rdma_xserver           rdma_xserver -p P -c x / rdma_xclient -s 127.0.0.1 -p P -c x (XRC: the
#                          client's INI QP sends into the server's XRC SRQ, whose number came in
#                          the REP's private data): "...: end 0"
#   perftest PROGRAM ARGS  PROGRAM -R -p P ARGS / PROGRAM -R -p P ARGS 127.0.0.1: the header says
#                          " Data ex. method : rdma_cm" and the result table is there
#   mckey                  mckey -m G -p 0x111 (receiver) / mckey -m G -s (sender), G an IPv4
#                          group of this run's: the receiver's success lines, both exit 0
#   qperf TEST...          qperf -lp P / qperf -lp P -cm1 -t 1 127.0.0.1 TEST... (rc_lat: a
#                          "latency  =" line, rc_bw: a "bw  =" line); the server is then stopped
# Every case checks that both processes loaded LIB_DIR's librdmacm.so.1 and libibverbs.so.1 (from
# the loader's own record, LD_DEBUG=libs) and no other, and that the host's shared state is gone
# afterwards. Each run has its own fabric (SOFTHCA_FABRIC, with this shell's pid) and its own port.
# rdma_cm servers bind no socket to wait for: with --listening SHIM (the rdmacm_listening library,
# preloaded into the server only) the client starts once the server's rdma_listen has returned;
# without it the client is retried (0.1 s apart, 20 s at most) while it fails as a client does when
# nobody listens yet (REJ 8) and the server still runs — which a client of several connections
# (ucmatose -c 8) can survive only if none of them reached the server.
# Exits 77 (skipped) when the program is not installed.
set -uo pipefail
here=$(dirname "$0")
source "$here/pingpong_lib.sh"
source "$here/perftest_lib.sh"

usage="usage: $0 SOFTHCA_BIN LIB_DIR [--link roce] [--two-hosts] [--listening SHIM] CASE [ARGS...]"
softhca=${1:?$usage}
lib_dir=${2:?$usage}
shift 2
link=() shim="" two_hosts="" fixed_ips=""
while [[ ${1:-} == --* ]]; do
  case $1 in
    --link) link=(--link "$2"); shift 2 ;;
    --two-hosts) two_hosts=1; shift ;;
    --listening) shim=$2; shift 2 ;;
    *) echo "$usage"; exit 2 ;;
  esac
done
case_name=${1:?$usage}
case_args="$*"
shift
preload_sanitizer_runtime "$lib_dir"

readonly run_timeout=60
fabric="${SOFTHCA_FABRIC:-ctest-rdmacm}-$$"
roce_net="127.$(( ($$ >> 8) % 200 + 20 )).$(( $$ & 255 ))"  # --two-hosts on RoCE: 127.x.y.1 and .2
port=$(pick_port)
out=$(mktemp -d)
# On the way out: the server (if still running) is asked to stop first, so that its program exits
# and takes its shared state with it; then whatever is left is killed.
cleanup() {
  [[ $BASHPID == "$$" ]] || return 0
  [[ -n ${server:-} ]] && kill -TERM "$server" 2>/dev/null && sleep 0.2
  kill_started
  rm -rf "$out"
}
trap cleanup EXIT

rc=0
failed() {
  echo "FAIL: $*"
  rc=1
}

# side_command SIDE COMMAND...: sets `cmd` to COMMAND on this host through `softhca run` under
# `timeout`, the loader's record of the libraries it loads going to $out/ld.SIDE.<pid>.
side_command() {
  local side=$1 host=()
  shift
  if [[ -n $two_hosts ]]; then
    if [[ $side == server ]]; then host=(--host b); else host=(--host a); fi
    # RoCE: addresses of this run's own (the first host of a fabric would take the machine's
    # interface address and its RoCE port, which another run's host may hold at the same time);
    # on InfiniBand too where the client must know b's address before b runs (fixed_ips).
    if [[ ${link[*]} == *roce* || -n $fixed_ips ]]; then
      if [[ $side == server ]]; then host+=(--ip "$roce_net.2"); else host+=(--ip "$roce_net.1"); fi
    fi
  fi
  cmd=(timeout "$run_timeout" env "${run_env[@]}" LD_DEBUG=libs LD_DEBUG_OUTPUT="$out/ld.$side"
       "$softhca" run --lib-dir "$lib_dir" --fabric "$fabric" "${link[@]}" "${host[@]}" -- "$@")
}

# The address the client names the server by: 127.0.0.1 on one host; with --two-hosts host b's
# (once its server listens, b is on the fabric).
server_address() {
  if [[ -z $two_hosts ]]; then
    echo 127.0.0.1
    return
  fi
  if [[ -n $fixed_ips ]]; then
    echo "$roce_net.2"
    return
  fi
  wait_listening_cm >/dev/null || return 1
  "$softhca" hosts --fabric "$fabric" "${link[@]}" --host b
}

# run_side SIDE COMMAND...: runs it, output to $out/SIDE.
run_side() {
  local side=$1
  side_command "$@"
  "${cmd[@]}" >"$out/$side" 2>&1
}

# start_server COMMAND...: runs the server in the background; $server is its `timeout`, which
# passes a SIGTERM on to the program. With a shim, the server's rdma_listen appends a line to
# $out/listening (after the sanitizer runtime, which must come first, if there is one).
start_server() {
  side_command server "$@"
  if [[ -n $shim ]]; then
    local preload=$shim e
    for e in "${run_env[@]}"; do [[ $e == LD_PRELOAD=* ]] && preload="${e#LD_PRELOAD=}:$shim"; done
    local at=$((3 + ${#run_env[@]}))  # after `timeout SECONDS env RUN_ENV...`: these win
    cmd=("${cmd[@]:0:at}" SOFTHCA_TEST_LISTENING="$out/listening" LD_PRELOAD="$preload" "${cmd[@]:at}")
  fi
  "${cmd[@]}" >"$out/server" 2>&1 &
  server=$!
  pids_to_kill+=("$server")
}

# wait_listening_cm: with a shim, waits (20 s at most) until the server's rdma_listen returned.
wait_listening_cm() {
  [[ -n $shim ]] || return 0
  local deadline=$((SECONDS + 20))
  while [[ ! -s $out/listening ]]; do
    if ! kill -0 "$server" 2>/dev/null || ((SECONDS >= deadline)); then
      failed "the server never listened (rdma_listen)"
      return 1
    fi
    sleep 0.02
  done
}

# run_client NOT_LISTENING COMMAND...: runs the client (exit code in $client_rc); without a shim,
# again while it fails with output matching the regex NOT_LISTENING and the server still runs (20 s
# at most). An empty NOT_LISTENING runs it once; "always:REGEX" retries on REGEX even with a shim.
run_client() {
  local not_listening=$1 deadline=$((SECONDS + 20)) attempts=0
  shift
  if [[ $not_listening == always:* ]]; then
    not_listening=${not_listening#always:}
  elif [[ -n $shim ]]; then
    wait_listening_cm || return 0
    not_listening=""
  fi
  while true; do
    attempts=$((attempts + 1))
    run_side client "$@"
    client_rc=$?
    if [[ $client_rc -ne 0 && -n $not_listening ]] && grep -Eq -- "$not_listening" "$out/client" &&
        kill -0 "$server" 2>/dev/null && ((SECONDS < deadline)); then
      sleep 0.1
      continue
    fi
    break
  done
  ((attempts > 1)) && echo "(the client ran $attempts times: the server was not listening yet)"
  return 0
}

wait_server() {
  wait "$server"
  server_rc=$?
}

show() {
  local side
  for side in "$@"; do
    local var=${side}_rc
    echo "--- $side (exit ${!var})"
    cat "$out/$side"
  done
}

# expect_exit SIDE: SIDE exited 0.
expect_exit() {
  local var=${1}_rc
  [[ ${!var} -eq 0 ]] || failed "$1 exited ${!var}"
}

# expect_lines SIDE LINE...: SIDE's output has these exact lines, in this order.
expect_lines() {
  local side=$1 line n=0 at
  shift
  for line in "$@"; do
    at=$(tail -n +"$((n + 1))" "$out/$side" | grep -nxF -m1 -- "$line" | cut -d: -f1)
    if [[ -z $at ]]; then
      failed "$side: no line \"$line\" (after line $n)"
      return
    fi
    n=$((n + at))
  done
}

# The librdmacm.so.1 and libibverbs.so.1 each process of the run initialised: LIB_DIR's, never
# another (the system's would be the kernel rdma_cm client, which finds no device here).
check_libraries() {
  local f lib want got others
  for lib in librdmacm.so.1 libibverbs.so.1; do
    want=$(readlink -f "$lib_dir/$lib")
    got=0
    for f in "$out"/ld.*; do
      [[ -f $f ]] || continue
      while read -r path; do
        if [[ $(readlink -f "$path") == "$want" ]]; then got=$((got + 1)); else others+="$path "; fi
      done < <(sed -nE "s|.*calling init: (.*/$lib)\$|\\1|p" "$f" | sort -u)
    done
    ((got > 0)) || failed "no process loaded $lib_dir/$lib"
  done
  [[ -z ${others:-} ]] || failed "a process loaded another librdmacm/libibverbs: $others"
}

server_rc=0 client_rc=0 server=""
case $case_name in
  rping)
    need /usr/bin/rping
    start_server rping -s -a 0.0.0.0 -p "$port"
    peer=$(server_address) || failed "no address for host b"
    run_client 'RDMA_CM_EVENT_REJECTED, error 8' rping -c -a "$peer" -p "$port" -C 100 -V -v
    wait_server
    show server client
    expect_exit server
    expect_exit client
    for i in $(seq 0 99); do
      grep -q "^ping data: rdma-ping-$i: " "$out/client" || failed "client: no ping $i"
    done
    n=$(grep -c '^ping data: rdma-ping-' "$out/client")
    [[ $n -eq 100 ]] || failed "client: $n ping lines, expected 100"
    ;;
  rping_rejected)
    need /usr/bin/rping
    run_side client rping -c -a 127.0.0.1 -p "$port" -C 1
    client_rc=$?
    show client
    [[ $client_rc -ne 0 ]] || failed "the client exited 0 with nobody listening"
    grep -qF 'RDMA_CM_EVENT_REJECTED, error 8' "$out/client" ||
      failed "client: no \"RDMA_CM_EVENT_REJECTED, error 8\" (REJ 8: no listener)"
    ;;
  ucmatose)
    need /usr/bin/ucmatose
    start_server ucmatose -c 8 -p "$port"
    peer=$(server_address) || failed "no address for host b"
    run_client 'RDMA_CM_EVENT_REJECTED, error: 8' ucmatose -s "$peer" -c 8 -p "$port"
    wait_server
    show server client
    expect_exit server
    expect_exit client
    expect_lines server "cmatose: starting server" "initiating data transfers" "completing sends" \
      "receiving data transfers" "data transfers complete" "cmatose: disconnecting" "disconnected" \
      "test complete" "return status 0"
    expect_lines client "cmatose: starting client" "cmatose: connecting" "receiving data transfers" \
      "sending replies" "data transfers complete" "test complete" "return status 0"
    ;;
  udaddy)
    # udaddy has no port option (its -p is the port space): the fixed 7174, in this run's fabric.
    need /usr/bin/udaddy
    start_server udaddy
    peer=$(server_address) || failed "no address for host b"
    run_client 'RDMA_CM_EVENT_UNREACHABLE, error: 1' udaddy -s "$peer"
    wait_server
    show server client
    expect_exit server
    expect_exit client
    expect_lines server "udaddy: starting server" "receiving data transfers" "sending replies" \
      "data transfers complete" "test complete" "return status 0"
    expect_lines client "udaddy: starting client" "udaddy: connecting" "initiating data transfers" \
      "receiving data transfers" "data transfers complete" "test complete" "return status 0"
    ;;
  rdma_server)
    need /usr/bin/rdma_server /usr/bin/rdma_client
    start_server rdma_server -p "$port"
    peer=$(server_address) || failed "no address for host b"
    run_client 'rdma_connect: Connection refused' rdma_client -s "$peer" -p "$port"
    wait_server
    show server client
    expect_exit server
    expect_exit client
    expect_lines server "rdma_server: start" "rdma_server: end 0"
    expect_lines client "rdma_client: start" "rdma_client: end 0"
    ;;
  rdma_xserver)
    need /usr/bin/rdma_xserver /usr/bin/rdma_xclient
    start_server rdma_xserver -p "$port" -c x
    peer=$(server_address) || failed "no address for host b"
    run_client 'rdma_connect: Connection refused' rdma_xclient -s "$peer" -p "$port" -c x
    wait_server
    show server client
    expect_exit server
    expect_exit client
    expect_lines server "rdma_xserver: start" "rdma_xserver: end 0"
    expect_lines client "rdma_xclient: start" "rdma_xclient: end 0"
    ;;
  perftest)
    program=${1:?perftest PROGRAM ARGS...}
    shift
    need "/usr/bin/$program"
    perftest_parse_args "$program" "$@"
    # After the control exchange the server makes its test listener while the client connects its
    # test QP; a client first gets REJ 8 (no listener, as from a kernel's ib_cm) and perftest's
    # retry then uses the ids it destroyed and crashes (docs/rdma-cm-programs.md). perftest's race:
    # the pair runs again (at most 3 times) when that is what happened.
    for attempt in 1 2 3; do
      start_server "$program" -R -p "$port" "$@"
      peer=$(server_address) || failed "no address for host b"
      run_client 'Unexpected CM event bl blka 8' "$program" -R -p "$port" "$@" "$peer"
      if ((client_rc != 0)) && grep -q 'RDMA_CM_EVENT_REJECTED; error: 8' "$out/client" && ((attempt < 3)); then
        echo "(attempt $attempt: the client's test connection came before the server's listener: REJ 8; again)"
        kill -TERM "$server" 2>/dev/null
        wait "$server" 2>/dev/null
        rm -f "$out/listening"
        port=$(pick_port)
        continue
      fi
      break
    done
    wait_server
    show server client
    for side in server client; do
      var=${side}_rc
      perftest_check_side "$program" "$side" "${!var}" "$out/$side" || rc=1
      grep -qE '^ Data ex\. method : rdma_cm' "$out/$side" ||
        failed "$side: the header does not say \" Data ex. method : rdma_cm\""
    done
    ;;
  mckey)
    # A receiver joins the group (its rdma_cm id resolves the group address, joins, attaches its UD
    # QP) and waits for 10 datagrams; the sender joins too and sends them 3 s after its join
    # (mckey's own pause), by when the receiver, started a second before it, has joined. The group
    # address is this run's (from its pid).
    need /usr/bin/mckey
    group="239.$(( ($$ >> 16) & 255 )).$(( ($$ >> 8) & 255 )).$(( $$ & 255 ))"
    start_server mckey -m "$group"
    sleep 1
    run_client 'always:^(never retried)$' mckey -m "$group" -s
    wait_server
    show server client
    expect_exit server
    expect_exit client
    expect_lines server "mckey: starting server" "mckey: joining" "receiving data transfers" \
      "data transfers complete" "test complete" "return status 0"
    expect_lines client "mckey: starting client" "mckey: joining" "initiating data transfers" \
      "data transfers complete" "test complete" "return status 0"
    grep -q "^mckey: joined dgid: .* mlid 0x[0-9a-f]* sl 0$" "$out/client" || failed "client: no \"joined dgid\" line"
    ;;
  qperf)
    # Several tests in one client run: qperf's server serves each in a fresh fork child, which
    # takes the host-segment slot the previous test's child left; the client, which lives on,
    # must not write into the old child's pages (runtime/range_table.h clear_keeping_generations).
    tests=("$@")
    ((${#tests[@]} > 0)) || { echo "qperf TEST..."; exit 2; }
    need /usr/bin/qperf
    fixed_ips=1
    # Its control port is a real TCP port: another one when that is taken (by any program).
    for try in 1 2 3 4 5; do
      start_server qperf -lp "$port"
      wait_listening "$port" 20 "$server" && break
      wait "$server"
      if ((try == 5)) || ! grep -q 'unable to bind to listen port' "$out/server"; then
        cat "$out/server"
        failed "the qperf server never listened on TCP port $port"
        exit 1
      fi
      port=$(pick_port)
    done
    # qperf's server binds its rdma_cm id, sends the port to the client over TCP, and only then
    # calls rdma_listen: a client quicker than that gets REJ 8 (no listener), as it would from a
    # kernel's ib_cm. That race is qperf's: the client runs again, as for the other programs.
    # qperf names one host for its TCP control connection and for rdma_cm: with --two-hosts, b's
    # address (which the machine routes to itself). qperf's server opens the device only when a
    # test starts, so b's address is fixed beforehand (--ip, recorded in the registry as it joins).
    peer=$(server_address) || failed "no address for host b"
    run_client 'always:unexpected event from RDMA CM: Event rejected' \
      qperf -lp "$port" -cm1 -t 1 "$peer" "${tests[@]}"
    # The server runs until stopped: SIGTERM through its `timeout`, which passes it on — once the
    # child that served the test has finished (10 s at most): a child killed while it detaches
    # would leave the host segment behind (the last process to leave unlinks it).
    deadline=$((SECONDS + 10))
    for main in $(pgrep -P "$server"); do
      while pgrep -P "$main" >/dev/null && ((SECONDS < deadline)); do sleep 0.05; done
    done
    kill -TERM "$server" 2>/dev/null
    wait_server
    show client
    echo "--- server (stopped, exit $server_rc)"
    cat "$out/server"
    expect_exit client
    for test_name in "${tests[@]}"; do
      case $test_name in
        rc_lat | rc_rdma_read_lat | rc_rdma_write_lat) pattern='^    latency  = +[0-9.]+ [mun]?s$' ;;
        rc_bw | rc_bi_bw | rc_rdma_read_bw | rc_rdma_write_bw) pattern='^    bw  = +[0-9.]+ [KMG]?B/sec$' ;;
        *) pattern="^$test_name:" ;;
      esac
      grep -qx -- "$test_name:" "$out/client" || failed "client: no \"$test_name:\" line"
      grep -A1 -x -- "$test_name:" "$out/client" | grep -Eq -- "$pattern" ||
        failed "client: $test_name: no line matching /$pattern/"
    done
    ;;
  *)
    echo "$usage"
    exit 2
    ;;
esac

check_libraries
# The processes are gone (the qperf server stopped): so must be their host's segment and registry.
# The last process to leave removes them as it exits. rping_rejected: rping's CM thread calls
# exit() on the REJECTED event while its main thread returns from main(), and the second exit
# ends the process in the middle of the first one's teardown, as a kill would: what it leaves is
# the next process of the host's to reclaim (docs/live-mode.md). There, it is said and removed.
if ! leftover_shm "$fabric"; then
  if [[ $case_name == rping_rejected ]]; then
    echo "note: rping exited twice at once (two threads called exit); its host's files removed"
    rm -f "/dev/shm/softhca-$(id -u)/$fabric.hosts" "/dev/shm/softhca-$(id -u)/$fabric@"*
  else
    failed "shared state left in /dev/shm"
  fi
fi
[[ $rc -eq 0 ]] && echo "PASS: $case_args ${link[*]}"
exit $rc
