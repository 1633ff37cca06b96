#!/usr/bin/env bash
# The stacks on softhca, unmodified Debian binaries through `softhca run` on one host
# (docs/ecosystem.md): UCX, Open MPI over its three RDMA paths, libfabric's verbs provider, and
# qperf in its default (event-driven) mode.
#   ecosystem.sh SOFTHCA_BIN LIB_DIR CASE [ARGS...]
# CASE:
#   ucx_perftest TEST [ARGS]  ucx_perftest (server) / ucx_perftest 127.0.0.1 -t TEST ARGS (client)
#                             with UCX_NET_DEVICES=softhca_0:1 UCX_TLS=rc_verbs,ud_verbs,self: the
#                             client's "Final:" line, both exit 0
#   mpi PATH RANKS PROGRAM    mpirun -np RANKS over PATH = ucx (--mca pml ucx), openib (--mca btl
#                             openib,self) or ofi (--mca pml cm --mca mtl ofi, libfabric's
#                             verbs;ofi_rxm); PROGRAM = mpi_check (ours: checked ping-pong and
#                             collectives, "mpi_check: ok N ranks") or netpipe (NPopenmpi -i, its
#                             integrity mode, then a 1-byte..1-MiB run with a table to 1048576)
#   fi_info                   fi_info -p verbs lists the domain softhca_0 (MSG and RDM) and
#                             softhca_0-dgram
#   fi_pingpong EP            fi_pingpong -p verbs -e msg, or -p "verbs;ofi_rxm" -e rdm, with -c
#                             (every payload checked): the result table to 1m, both exit 0
#   qperf TEST...             qperf / qperf 127.0.0.1 TEST... in qperf's default event mode (no -cm1,
#                             no polling option): each test's result line (latency, bandwidth —
#                             send and receive for UC and UD — or message rate)
# Every case runs in a fabric of its own (SOFTHCA_FABRIC with this shell's pid), dumps the device's
# counters (softhca run --stats) and checks that the bytes went through the HCA (packets sent and
# received, payload DMA; for mpi_check at least the ping-pong's own bytes), and that no shared
# state is left. Every wait is bounded. Exits 77 (skipped) when a program is not installed.
set -uo pipefail
here=$(dirname "$0")
source "$here/pingpong_lib.sh"

usage="usage: $0 SOFTHCA_BIN LIB_DIR CASE [ARGS...]"
softhca=${1:?$usage}
lib_dir=${2:?$usage}
case_name=${3:?$usage}
shift 3
case_args="$case_name $*"
preload_sanitizer_runtime "$lib_dir"

readonly run_timeout=150
fabric="${SOFTHCA_FABRIC:-ctest-ecosystem}-$$"
port=$(pick_port)
out=$(mktemp -d)
cleanup() {
  [[ $BASHPID == "$$" ]] || return 0
  kill_started
  rm -rf "$out"
}
trap cleanup EXIT

rc=0
failed() {
  echo "FAIL: $*"
  rc=1
}

export UCX_NET_DEVICES=softhca_0:1 UCX_TLS=rc_verbs,ud_verbs,self UCX_WARN_UNUSED_ENV_VARS=n
# side_command SIDE COMMAND...: `cmd` is COMMAND through `softhca run` under `timeout`, its
# device counters to $out/stats.SIDE.
side_command() {
  local side=$1
  shift
  cmd=(timeout "$run_timeout" env "${run_env[@]}" "$softhca" run --lib-dir "$lib_dir" --fabric "$fabric"
       --stats "$out/stats.$side" -- "$@")
}
run_side() {
  local side=$1
  side_command "$@"
  "${cmd[@]}" >"$out/$side" 2>&1
}
start_server() {
  side_command server "$@"
  "${cmd[@]}" >"$out/server" 2>&1 &
  server=$!
  pids_to_kill+=("$server")
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
    tail -n 60 "$out/$side"
  done
}
expect_exit() {
  local var=${1}_rc
  [[ ${!var} -eq 0 ]] || failed "$1 exited ${!var}"
}

# expect_traffic SIDE MIN_BYTES: the device counters SIDE's run dumped show packets both ways, at
# least MIN_BYTES of payload sent and received, payload DMA, and no packet dropped as malformed.
expect_traffic() {
  local side=$1 min=$2 file="$out/stats.$1"
  [[ -s $file ]] || { failed "$side: no counters dumped ($file)"; return; }
  python3 - "$file" "$min" <<'EOF' || failed "$side: the counters do not show the traffic (above)"
import json, sys
devices = json.load(open(sys.argv[1]))["devices"]
minimum = int(sys.argv[2])
ok = True
for d in devices:
    p = d["packets"]
    tlps = {t["cause"]: t for t in d["pcie"]["tlps"]}
    payload_dma = tlps.get("payload_write", {}).get("payload_bytes", 0)
    print(f"{d['device']}: sent {p['sent']} received {p['received']} packets, "
          f"{p['bytes_sent']} / {p['bytes_received']} bytes, payload DMA writes {payload_dma} bytes, "
          f"malformed {p['dropped']['malformed']}")
    if d["device"] != "softhca_0":
        continue
    ok = ok and p["sent"] > 0 and p["received"] > 0 and p["dropped"]["malformed"] == 0
    ok = ok and p["bytes_sent"] >= minimum and p["bytes_received"] >= minimum and payload_dma > 0
sys.exit(0 if ok and devices else 1)
EOF
}

case $case_name in
  ucx_perftest)
    need ucx_perftest
    test_name=${1:?ucx_perftest TEST [ARGS]}
    start_server ucx_perftest -p "$port"
    if ! wait_listening "$port" 30 "$server"; then
      cat "$out/server"
      failed "ucx_perftest's server never listened on TCP port $port"
      exit 1
    fi
    run_side client ucx_perftest 127.0.0.1 -p "$port" -t "$@"
    client_rc=$?
    wait_server
    show client server
    expect_exit client
    expect_exit server
    grep -Eq '^Final: +[0-9]+ ' "$out/client" || failed "client: no \"Final:\" line"
    grep -q "Fatal\|Error" "$out/client" "$out/server" && failed "UCX reported an error"
    expect_traffic server 1
    ;;
  mpi)
    need mpirun
    path=${1:?mpi PATH RANKS PROGRAM} ranks=${2:?mpi PATH RANKS PROGRAM} program=${3:?mpi PATH RANKS PROGRAM}
    mca=(--mca btl_base_warn_component_unused 0)
    case $path in
      ucx) mca+=(--mca pml ucx --mca btl '^vader,tcp,openib,uct' -x UCX_NET_DEVICES -x UCX_TLS) ;;
      # No "no preset parameters for the device" help text: mpirun's aggregation of it reads freed
      # memory (Open MPI 4.1's show_help over PMIx; a sanitizer runtime catches it).
      openib) mca+=(--mca pml ob1 --mca btl openib,self --mca btl_openib_allow_ib 1
                    --mca btl_openib_warn_no_device_params_found 0) ;;
      ofi) mca+=(--mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include 'verbs;ofi_rxm') ;;
      *) echo "mpi PATH: ucx, openib or ofi"; exit 2 ;;
    esac
    as_root=()
    [[ $(id -u) -eq 0 ]] && as_root=(--allow-run-as-root)
    # Under a sanitizer runtime (sanitizer builds), Open MPI's memory patcher, which rewrites the
    # code of munmap and its kin in place, and the runtime's own interceptors of them end in a jump
    # to nowhere: the patcher is left out there (Open MPI then keeps no registration cache).
    ((${#run_env[@]} > 0)) && export OMPI_MCA_memory='^patcher'

    mpirun_cmd=(mpirun "${as_root[@]}" --oversubscribe --bind-to none -np "$ranks" "${mca[@]}")
    case $program in
      mpi_check)
        binary=${MPI_CHECK:-}
        if [[ ! -x $binary ]]; then
          # Built by CMake when Open MPI's headers are there (libopenmpi-dev, .ci/packages.txt).
          [[ ${CI:-} == true ]] && { echo "FAIL: mpi_check was not built (MPI_CHECK)"; exit 1; }
          echo "SKIP: mpi_check was not built (no libopenmpi-dev)"
          exit 77
        fi
        run_side job "${mpirun_cmd[@]}" "$binary"
        job_rc=$?
        show job
        expect_exit job
        grep -qx "mpi_check: ok $ranks ranks" "$out/job" || failed "no \"mpi_check: ok $ranks ranks\" line"
        # The ping-pong alone: 4 rounds each way of 1, 4, ..., 1 MiB bytes.
        expect_traffic job $(( 8 * (4 ** 11 - 1) / 3 ))
        ;;
      netpipe)
        need NPopenmpi
        run_side integrity "${mpirun_cmd[@]}" NPopenmpi -i -u 65536 -o "$out/np.integrity"
        integrity_rc=$?
        run_side job "${mpirun_cmd[@]}" NPopenmpi -u 1048576 -n 20 -p 0 -o "$out/np.out"
        job_rc=$?
        show integrity job
        expect_exit integrity
        expect_exit job
        grep -q "Integrity check passed" "$out/integrity" || failed "NPopenmpi -i: no \"Integrity check passed\""
        grep -Eq '^ *1048576 ' "$out/np.out" || failed "NPopenmpi: no 1048576-byte row in its table"
        expect_traffic job $(( 20 * 2 * 1048576 ))
        ;;
      *) echo "mpi PROGRAM: mpi_check or netpipe"; exit 2 ;;
    esac
    ;;
  fi_info)
    need fi_info
    run_side client fi_info -p verbs
    client_rc=$?
    show client
    expect_exit client
    for want in "softhca_0 FI_EP_MSG" "softhca_0 FI_EP_RDM" "softhca_0-dgram FI_EP_DGRAM"; do
      awk -v d="${want% *}" -v t="${want#* }" '$1 == "domain:" { dom = $2 } $1 == "type:" && dom == d && $2 == t { found = 1 }
        END { exit !found }' "$out/client" || failed "fi_info -p verbs lists no $want"
    done
    ;;
  fi_pingpong)
    need fi_pingpong
    ep=${1:?fi_pingpong msg|rdm}
    case $ep in
      msg) prov=verbs ;;
      rdm) prov="verbs;ofi_rxm" ;;
      *) echo "fi_pingpong EP: msg or rdm"; exit 2 ;;
    esac
    start_server fi_pingpong -p "$prov" -e "$ep" -B "$port" -I 200 -c
    wait_listening "$port" 30 "$server" || failed "fi_pingpong's server never listened on TCP port $port"
    run_side client fi_pingpong -p "$prov" -e "$ep" -P "$port" -I 200 -c 127.0.0.1
    client_rc=$?
    wait_server
    show client server
    expect_exit client
    expect_exit server
    for size in 64 1k 64k 1m; do
      grep -Eq "^$size +200 +=200 " "$out/client" || failed "client: no row for $size bytes"
    done
    expect_traffic server $(( 200 * 1048576 ))
    ;;
  qperf)
    need qperf
    (($# > 0)) || { echo "qperf TEST..."; exit 2; }
    start_server qperf -lp "$port"
    wait_listening "$port" 30 "$server" || failed "the qperf server never listened on TCP port $port"
    run_side client qperf -lp "$port" -t 1 127.0.0.1 "$@"
    client_rc=$?
    # The server runs until stopped, once the child that served the last test is done.
    deadline=$((SECONDS + 10))
    for main in $(pgrep -P "$server"); do
      while pgrep -P "$main" >/dev/null && ((SECONDS < deadline)); do sleep 0.05; done
    done
    kill -TERM "$server" 2>/dev/null
    wait_server
    show client
    expect_exit client
    for test_name in "$@"; do
      case $test_name in
        *_lat) pattern='^    latency  = +[0-9.]+ [mun]?s$' ;;
        *_bw) pattern='^    (send_|recv_)?bw  = +[0-9.]+ [KMG]?B/sec$' ;;  # UC and UD: send and receive
        *) pattern='^    msg_rate  = +[0-9.]+ [KM]?/sec$' ;;            # atomics
      esac
      grep -qx -- "$test_name:" "$out/client" || failed "client: no \"$test_name:\" line"
      grep -A1 -x -- "$test_name:" "$out/client" | grep -Eq -- "$pattern" ||
        failed "client: $test_name: no line matching /$pattern/"
    done
    grep -q "failed\|timed out" "$out/client" && failed "qperf reported a failure"
    expect_traffic client 1
    ;;
  *)
    echo "$usage"
    exit 2
    ;;
esac

if ! leftover_shm "$fabric"; then
  failed "shared state left in /dev/shm"
fi
[[ $rc -eq 0 ]] && echo "PASS: $case_args"
exit $rc
