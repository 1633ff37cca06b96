#!/usr/bin/env bash
# Unmodified ibverbs-utils ibv_xsrq_pingpong (XRC: each side's INI QP sends into the other's XRC
# SRQ through its TGT QP) between two processes, through `softhca run`:
#   xsrq_pingpong.sh SOFTHCA_BIN LIB_DIR [--two-hosts] [--link roce] [--pcap] [PROGRAM OPTIONS...]
# One host: both processes on the host's one device, each opening /tmp/xrc_domain (the same XRC
# domain). --two-hosts: the server on host b, the client on host a (the UDP carrier). RoCE adds
# the program's -g 0 (a RoCE path carries a GRH). --pcap: the server's host captures what it
# sends, and tshark must read XRC SEND First/Middle/Last/Only to the client's TGT QP, each with the
# client's SRQ number in the 4 bytes after the BTH (the XRCETH, which tshark 4.0 decodes no further
# than "Unknown/Vendor Specific Data"), and XRC Acknowledges with nothing but an AETH there. Checks that both exit 0 and print "success",
# and that the host's shared state is gone. Exits 77 (skipped) when a program is not installed.
set -uo pipefail
here=$(dirname "$0")
source "$here/pingpong_lib.sh"

usage="usage: $0 SOFTHCA_BIN LIB_DIR [--two-hosts] [--link roce] [--pcap] [OPTIONS...]"
softhca=${1:?$usage}
lib_dir=${2:?$usage}
shift 2
two_hosts="" link=() pcap="" gid=()
while [[ ${1:-} == --* ]]; do
  case $1 in
    --two-hosts) two_hosts=1; shift ;;
    --link) link=(--link "$2"); [[ $2 == roce ]] && gid=(-g 0); shift 2 ;;
    --pcap) pcap=1; shift ;;
    *) break ;;
  esac
done
need ibv_xsrq_pingpong
[[ -n $pcap ]] && need tshark
program=$(command -v ibv_xsrq_pingpong)
preload_sanitizer_runtime "$lib_dir"

readonly run_timeout=120
fabric="xsrq$$"
port=$(pick_port)
out=$(mktemp -d)
run=(env "${run_env[@]}" "$softhca" run --lib-dir "$lib_dir" --fabric "$fabric" "${link[@]}" --host)
server_host=host0 client_host=host0
[[ -n $two_hosts ]] && server_host=b client_host=a
capture=()
[[ -n $pcap ]] && capture=(--pcap "$out/server.pcap")

timeout "$run_timeout" "${run[@]}" "$server_host" "${capture[@]}" -- "$program" -p "$port" "${gid[@]}" "$@" \
  >"$out/server" 2>&1 &
server=$!
pids_to_kill+=("$server")
if ! wait_listening "$port" 20 "$server"; then
  echo "FAIL: the server never listened on port $port"
  cat "$out/server"
  exit 1
fi
timeout "$run_timeout" "${run[@]}" "$client_host" -- "$program" -p "$port" "${gid[@]}" "$@" localhost >"$out/client" 2>&1
client_rc=$?
wait "$server"
server_rc=$?

echo "--- server (exit $server_rc)"; cat "$out/server"
echo "--- client (exit $client_rc)"; cat "$out/client"
rc=0
for side in server client; do
  var=${side}_rc
  if [[ ${!var} -ne 0 ]]; then echo "FAIL: $side exited ${!var}"; rc=1; fi
  if ! grep -qx "success" "$out/$side"; then echo "FAIL: $side did not print success"; rc=1; fi
done

if [[ -n $pcap && $rc -eq 0 ]]; then
  # The server prints the client's as "remote: LID l, QPN RECV <tgt> SEND <ini>, PSN p, SRQN <srqn>, ...".
  field() { awk -v k="$1" '/remote:/ { for (i = 1; i < NF; ++i) if ($i == k) { v = $(i + 1); sub(",", "", v); print v } }' \
    "$out/server"; }
  tgt=$(field RECV)
  srqn=$(field SRQN)
  # XRCETH: Rsv8 and the 24-bit SRQ number, the first 4 bytes tshark leaves undecoded.
  xrceth=$(printf '%08x' "$((16#$srqn))")
  if ! timeout 60 tshark -r "$out/server.pcap" -T fields -e infiniband.bth.opcode -e infiniband.bth.destqp \
      -e infiniband.vendor >"$out/fields" 2>"$out/tshark.err"; then
    echo "FAIL: tshark could not read the capture:"; cat "$out/tshark.err"; rc=1
  fi
  # Requests to the TGT QP: opcodes 160-162 (XRC SEND First/Middle/Last), 164 (Only). tshark lists
  # the undecoded headers first (then the rest of the packet), comma-separated.
  first_hdr='{ split($3, v, ","); h = v[1] }'
  requests=$(awk -v q="0x$tgt" -v x="$xrceth" "$first_hdr"' $1 >= 160 && $1 <= 164 && $2 == q && h == x' \
    "$out/fields" | wc -l)
  bad=$(awk -v q="0x$tgt" -v x="$xrceth" "$first_hdr"' $1 >= 160 && $1 <= 164 && (h != x || $2 != q)' \
    "$out/fields" | wc -l)
  acks=$(awk '$1 == 177' "$out/fields" | wc -l)  # XRC Acknowledge: AETH only (4 bytes)
  long_acks=$(awk "$first_hdr"' $1 == 177 && length(h) != 8' "$out/fields" | wc -l)
  echo "capture: $requests XRC requests to TGT QP $tgt with XRCETH $xrceth, $acks XRC ACKs"
  if [[ $requests -eq 0 || $bad -ne 0 ]]; then echo "FAIL: XRC requests elsewhere or without XRCETH $xrceth: $bad"; rc=1; fi
  if [[ $acks -eq 0 ]]; then echo "FAIL: no XRC Acknowledge in the capture"; rc=1; fi
  if [[ $long_acks -ne 0 ]]; then echo "FAIL: XRC ACKs with more than an AETH: $long_acks"; rc=1; fi
fi
if ! leftover_shm "$fabric"; then echo "FAIL: shared state left in /dev/shm"; rc=1; fi
[[ -n ${KEEP:-} ]] && echo "kept $out" || rm -rf "$out"
[[ $rc -eq 0 ]] && echo "PASS: ibv_xsrq_pingpong $*"
exit $rc
