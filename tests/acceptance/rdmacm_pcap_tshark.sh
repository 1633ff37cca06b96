#!/usr/bin/env bash
# An rping connection captured with SOFTHCA_PCAP (`softhca run --pcap`, docs/observability.md) and
# read by the Debian tshark as InfiniBand CM:
#   rdmacm_pcap_tshark.sh SOFTHCA_BIN LIB_DIR ib|roce
# rping -s / rping -c -C 10 on one host, each process capturing what it sends. Checks: the files
# are link type ERF (197, InfiniBand) or Ethernet (1, RoCEv2); every frame decodes as
# erf:infiniband or eth:ethertype:ip:udp:infiniband (then :data for a payload); the CM MADs (class
# 0x07, to QP1) are the connection's ConnectRequest, ConnectReply and ReadyToUse, then
# DisconnectRequest and DisconnectReply, with the attribute IDs 0x0010, 0x0013, 0x0014, 0x0015,
# 0x0016 (IBA 16.7); the REQ's service ID is rdma_cm's (protocol 0x06, TCP port space; the rping
# port) and its private data the CMA header with 127.0.0.1 on both ends (rdmacm.md §4.10, §6.3);
# the RTU, DREQ and DREP carry the communication IDs of the REQ and REP; tshark reports no
# malformed frame and no expert information. Exits 77 (skipped) without tshark or rping.
set -uo pipefail
here=$(dirname "$0")
source "$here/pingpong_lib.sh"

softhca=${1:?usage: $0 SOFTHCA_BIN LIB_DIR ib|roce}
lib_dir=${2:?}
link=${3:?}
command -v tshark >/dev/null || { echo "SKIP: tshark is not installed"; exit 77; }
[[ -x /usr/bin/rping ]] || { echo "SKIP: rping (rdmacm-utils) is not installed"; exit 77; }
preload_sanitizer_runtime "$lib_dir"

fabric="${SOFTHCA_FABRIC:-ctest-rdmacm-pcap}-$$"
port=$(pick_port)
dir=$(mktemp -d)
trap 'kill_started; rm -rf "$dir"' EXIT
run=(env "${run_env[@]}" "$softhca" run --lib-dir "$lib_dir" --fabric "$fabric" --link "$link")

timeout 60 "${run[@]}" --pcap "$dir/server.pcap" -- rping -s -a 0.0.0.0 -p "$port" >"$dir/server.out" 2>&1 &
server=$!
pids_to_kill+=("$server")
# rping's server binds no socket: the client is retried while nobody listens yet (REJ 8).
deadline=$((SECONDS + 20))
while true; do
  rm -f "$dir/client.pcap"
  timeout 60 "${run[@]}" --pcap "$dir/client.pcap" -- rping -c -a 127.0.0.1 -p "$port" -C 10 -v \
    >"$dir/client.out" 2>&1
  client_rc=$?
  if [[ $client_rc -ne 0 ]] && grep -qF 'RDMA_CM_EVENT_REJECTED, error 8' "$dir/client.out" &&
      kill -0 "$server" 2>/dev/null && ((SECONDS < deadline)); then
    sleep 0.1
    continue
  fi
  break
done
wait "$server"
server_rc=$?
if [[ $server_rc -ne 0 || $client_rc -ne 0 ]]; then
  echo "--- server (exit $server_rc)"; cat "$dir/server.out"
  echo "--- client (exit $client_rc)"; cat "$dir/client.out"
  echo "FAIL: the rping run failed"
  exit 1
fi

rc=0
fail() {
  echo "FAIL: $*"
  rc=1
}
if [[ $link == roce ]]; then
  want_link=1 stack='eth:ethertype:ip:udp:infiniband'
else
  want_link=197 stack='erf:infiniband'
fi
fields=(-e frame.protocols -e infiniband.bth.destqp -e infiniband.mad.mgmtclass
        -e infiniband.mad.attributeid -e _ws.col.Info)
mads=""
for side in client server; do
  f=$dir/$side.pcap
  [[ -s $f ]] || { fail "no capture $f"; continue; }
  got_link=$(od -An -tu4 -j20 -N4 "$f" | tr -d ' ')
  [[ $got_link == "$want_link" ]] || fail "$side.pcap has link type $got_link, not $want_link"
  frames=$(timeout 60 tshark -r "$f" -T fields "${fields[@]}" 2>/dev/null)
  echo "--- $side.pcap: $(wc -l <<<"$frames") frames"
  timeout 60 tshark -r "$f" 2>/dev/null
  bad=$(awk -F'\t' -v s="$stack" '$1 !~ ("^" s "(:data)?$")' <<<"$frames")
  [[ -z $bad ]] || { fail "$side.pcap frames not decoded as $stack:"; echo "$bad" | head; }
  mads+=$(awk -F'\t' -v side="$side" '$3 != "" { print side "\t" $0 }' <<<"$frames")$'\n'
  expert=$(timeout 60 tshark -r "$f" -q -z expert 2>/dev/null)
  if grep -Eq "Errors|Warns|Notes|Malformed" <<<"$expert"; then fail "$side.pcap: $expert"; fi
  flagged=$(timeout 60 tshark -r "$f" -Y '_ws.malformed || _ws.expert' 2>/dev/null)
  [[ -z $flagged ]] || { fail "$side.pcap frames with expert items:"; echo "$flagged" | head; }
done

# The MADs each side sent: class 0x07 (CM) to QP1, in this order (a retransmission would repeat
# one; none is expected on one host).
echo "--- CM MADs (side, protocols, destination QP, class, attribute, info)"
printf '%s' "$mads"
got=$(awk -F'\t' 'NF > 1 { print $1 " " $5 " " $6 }' <<<"$mads" | sed 's/ CM: / /')
want_client=$'client 0x0010 ConnectRequest\nclient 0x0014 ReadyToUse\nclient 0x0015 DisconnectRequest'
want_server=$'server 0x0013 ConnectReply\nserver 0x0016 DisconnectReply'
[[ $(grep '^client' <<<"$got") == "$want_client" ]] ||
  fail "the client's CM MADs are not REQ, RTU, DREQ: $(grep '^client' <<<"$got" | tr '\n' ';')"
[[ $(grep '^server' <<<"$got") == "$want_server" ]] ||
  fail "the server's CM MADs are not REP, DREP: $(grep '^server' <<<"$got" | tr '\n' ';')"
bad=$(awk -F'\t' 'NF > 1 && ($4 != "0x07" || $3 != "0x000001")' <<<"$mads")
[[ -z $bad ]] || fail "MADs not of class 0x07 to QP1: $bad"

# The REQ: rdma_cm's service ID and CMA header.
req=$(timeout 60 tshark -r "$dir/client.pcap" -Y infiniband.cm.req -T fields \
  -e infiniband.cm.req.serviceid.protocol -e infiniband.cm.req.serviceid.dport \
  -e infiniband.cm.req.ip_cm.sip4 -e infiniband.cm.req.ip_cm.dip4 2>/dev/null)
want_req=$(printf '0x06\t0x%04x\t127.0.0.1\t127.0.0.1' "$port")
[[ $req == "$want_req" ]] || fail "REQ service/CMA header: '$req', expected '$want_req'"

# Communication IDs (local, remote as each MAD's sender sees them): the REQ's local one and the
# REP's answer it, and the RTU, DREQ and DREP carry the same pair. (tshark 4.0 names the REQ's and
# the REP's Local Communication ID fields infiniband.cm.req and infiniband.cm.rep.)
commids() {  # SIDE ATTRIBUTE_ID FIELD FIELD
  timeout 60 tshark -r "$dir/$1.pcap" -Y "infiniband.mad.attributeid == $2" -T fields -e "$3" -e "$4" \
    2>/dev/null | tr '\t' ' '
}
req_id=$(commids client 0x0010 infiniband.cm.req infiniband.mad.attributeid)
req_id=${req_id%% *}
rep=$(commids server 0x0013 infiniband.cm.rep infiniband.cm.rep.remotecommid)
rtu=$(commids client 0x0014 infiniband.cm.rtu.localcommid infiniband.cm.rtu.remotecommid)
dreq=$(commids client 0x0015 infiniband.cm.dreq.localcommid infiniband.cm.dreq.remotecommid)
drep=$(commids server 0x0016 infiniband.cm.drsp.localcommid infiniband.cm.drsp.remotecommid)
echo "communication IDs (local remote): REQ $req_id; REP $rep; RTU $rtu; DREQ $dreq; DREP $drep"
rep_id=${rep%% *}
[[ -n $req_id && -n $rep_id && $rep == "$rep_id $req_id" ]] ||
  fail "the REP does not answer the REQ's communication ID"
[[ $rtu == "$req_id $rep_id" ]] || fail "the RTU does not carry the REQ's and REP's communication IDs"
[[ $dreq == "$req_id $rep_id" ]] || fail "the DREQ does not carry the connection's communication IDs"
[[ $drep == "$rep_id $req_id" ]] || fail "the DREP does not carry the connection's communication IDs"

if ! leftover_shm "$fabric"; then fail "shared state left in /dev/shm"; fi
[[ $rc -eq 0 ]] && echo "PASS: an rping connection on $link decodes in tshark as InfiniBand CM"
exit $rc
