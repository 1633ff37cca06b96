#!/usr/bin/env bash
# SOFTHCA_PCAP on an Ethernet (RoCEv2) port, read by the Debian tshark:
#   roce_pcap_tshark.sh ROCE_TWO_HOST_TEST
# Runs the two-host RoCE test (RC SEND, RDMA WRITE, RDMA READ, fetch-and-add, compare-and-swap
# between hosts on 127.0.0.2 and 127.0.0.3) with each host capturing, on UDP port 4791 (where
# tshark's InfiniBand dissector looks for RoCEv2). Checks: both files are pcap link type Ethernet
# (1); every frame decodes as eth:ethertype:ip:udp:infiniband (then :data for a payload) with a
# BTH opcode; the capture holds
# every operation; tshark reports no malformed frame and no expert information of any severity.
# Exits 77 (skipped) without tshark, or when UDP port 4791 is taken on those addresses.
set -uo pipefail
test_bin=${1:?usage: $0 ROCE_TWO_HOST_TEST}
command -v tshark >/dev/null || { echo "SKIP: tshark is not installed"; exit 77; }
for ip in 127.0.0.2 127.0.0.3; do
  if ss -Hlun "src $ip:4791" 2>/dev/null | grep -q .; then echo "SKIP: UDP $ip:4791 is in use"; exit 77; fi
done
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
ROCE_TEST_PCAP_DIR=$dir ROCE_TEST_PORT=4791 timeout 120 "$test_bin" \
  --gtest_filter='RoceTwoHosts.RcSendWriteReadAndAtomics*' >"$dir/run.out" 2>&1 ||
  { cat "$dir/run.out"; echo "FAIL: the RoCE workload failed"; exit 1; }
rc=0
opcodes=""
for host in a b; do
  f=$dir/$host.pcap
  [[ -s $f ]] || { echo "FAIL: no capture $f"; rc=1; continue; }
  # Link type from the pcap file header: bytes 20..23, little-endian as written on this machine.
  link=$(od -An -tu4 -j20 -N4 "$f" | tr -d ' ')
  [[ $link == 1 ]] || { echo "FAIL: $host.pcap has link type $link, not Ethernet (1)"; rc=1; }
  frames=$(timeout 60 tshark -r "$f" -T fields -e frame.protocols -e infiniband.bth.opcode 2>/dev/null)
  n=$(wc -l <<<"$frames")
  bad=$(awk -F'\t' '$1 !~ /^eth:ethertype:ip:udp:infiniband(:data)?$/ || $2 == ""' <<<"$frames")
  [[ -z $bad ]] || { echo "FAIL: $host.pcap frames not decoded as RoCEv2:"; echo "$bad" | head; rc=1; }
  opcodes+=$(cut -f2 <<<"$frames")$'\n'
  expert=$(timeout 60 tshark -r "$f" -q -z expert 2>/dev/null)
  if grep -Eq "Errors|Warns|Notes|Malformed" <<<"$expert"; then echo "FAIL: $host.pcap: $expert"; rc=1; fi
  flagged=$(timeout 60 tshark -r "$f" -Y '_ws.malformed || _ws.expert' 2>/dev/null)
  [[ -z $flagged ]] || { echo "FAIL: $host.pcap frames with expert items:"; echo "$flagged" | head; rc=1; }
  echo "$host.pcap: $n frames"
done
# IBA 9.2 opcodes: RC SEND First/Middle/Last 0/1/2, WRITE First..Last 6/7/8, READ Request 12,
# READ Response First/Middle/Last 13/14/15, Acknowledge 17, Atomic Acknowledge 18, CmpSwap 19,
# FetchAdd 20.
for op in 0 1 2 6 7 8 12 13 14 15 17 18 19 20; do
  grep -qx "$op" <<<"$opcodes" || { echo "FAIL: no opcode $op in the captures"; rc=1; }
done
[[ $rc -eq 0 ]] && echo "PASS: RoCEv2 captures decode in tshark with no expert information"
exit $rc
