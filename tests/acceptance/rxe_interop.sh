#!/usr/bin/env bash
# softhca against the real thing: Linux's Soft-RoCE (rdma_rxe) in a qemu guest, RoCEv2 on a tap link
# (docs/roce-wire.md). One guest boot (Debian's kernel, TCG, an initramfs built here by rxe_guest.sh)
# serves every run; the host end is `softhca run --link roce --ip <tap address>` in a network
# namespace made for the test, which holds the tap, so no traffic leaves it.
#   rxe_interop.sh SOFTHCA_BIN LIB_DIR STATS_CHECK LISTENING_SHIM
# Runs ibv_rc/uc/ud_pingpong, ib_write_lat, ib_read_lat -o 16, ib_atomic_lat -o 16, ib_send_bw,
# rping and ucmatose with rxe as server and as client; each must exit 0 on both sides with its bytes
# checked, the softhca side's --stats dump must show packets from the guest and none dropped as
# malformed or refused at the carrier (STATS_CHECK), and its --pcap must be tshark-clean. Then the
# tap's own capture is checked: tshark-clean, softhca's TTL and source ports, rxe's identifications.
# Needs root, /dev/net/tun, qemu-system-x86_64, a kernel with rdma_rxe in /boot and /lib/modules,
# busybox-static, tshark and the Debian programs above: exits 77 (skipped) saying which is missing,
# except with CI=true (CI installs them all), where it fails.
set -uo pipefail
here=$(dirname "$0")
source "$here/pingpong_lib.sh"
source "$here/rxe_guest.sh"

softhca=${1:?usage: $0 SOFTHCA_BIN LIB_DIR STATS_CHECK LISTENING_SHIM}
lib_dir=${2:?}
stats_check=${3:?}
shim=${4:?}
preload_sanitizer_runtime "$lib_dir"

readonly boot_timeout_s=180   # TCG on two shared cores: ~15 s idle, more under a parallel build
readonly run_timeout_s=90     # one program on either side
readonly guest_life_s=570     # the guest's whole life, under ctest's TIMEOUT of 600 s
readonly runs_until_s=360     # no run starts after this (from the start): the cleanup must happen
readonly iters=50

missing() {  # missing WHAT: skipped, or failed in CI
  if [[ ${CI:-} == true ]]; then echo "FAIL: $1 (CI installs everything the rxe test needs)"; exit 1; fi
  echo "SKIP: $1"
  exit 77
}
[[ $(id -u) -eq 0 ]] || missing "the rxe test needs root (a tap device and a network namespace)"
[[ -c /dev/net/tun ]] || missing "/dev/net/tun is missing (no tap devices here)"
command -v qemu-system-x86_64 >/dev/null || missing "qemu-system-x86_64 is not installed (qemu-system-x86)"
command -v ip >/dev/null || missing "ip is not installed (iproute2)"
kernel=$(rxe_kernel_release)
[[ -n $kernel ]] || missing "no kernel with an rdma_rxe module in /boot and /lib/modules (linux-image-amd64)"
for p in /bin/busybox /usr/bin/ibv_rc_pingpong /usr/bin/ib_write_lat /usr/bin/rping /usr/bin/ucmatose /usr/bin/rdma \
    /usr/bin/tshark; do
  [[ -x $p ]] || missing "$p is not installed"
done

tag=$(($$ % 60000))
ns="shrxe$tag"
tap="trxe$tag"
net="10.$((200 + tag / 250 % 50)).$((tag % 250))"
host_ip="$net.1"
guest_ip="$net.2"
out=$(mktemp -d)
qemu_pid=""
guest_rc=0

cleanup() {
  if [[ -n $qemu_pid ]] && kill -0 "$qemu_pid" 2>/dev/null; then
    echo "stop" >&"$ctl_w" 2>/dev/null
    for _ in $(seq 50); do kill -0 "$qemu_pid" 2>/dev/null || break; sleep 0.1; done
    kill "$qemu_pid" 2>/dev/null
    wait "$qemu_pid" 2>/dev/null
  fi
  kill_started
  ip netns del "$ns" 2>/dev/null
  rm -rf "$out"
}
trap cleanup EXIT

ip netns add "$ns" 2>/dev/null || missing "cannot create a network namespace here"
ip -n "$ns" tuntap add dev "$tap" mode tap 2>/dev/null || missing "cannot create a tap device here"
ip -n "$ns" addr add "$host_ip/24" dev "$tap" && ip -n "$ns" link set "$tap" up && ip -n "$ns" link set lo up || exit 1

if ! msg=$(build_rxe_initramfs "$kernel" "$out/initrd.cpio"); then missing "initramfs: $msg"; fi
mkfifo "$out/ctl.in" "$out/ctl.out"
# ttyS0: the kernel's console, kept for a failure report; ttyS1: the control channel (rxe_guest.sh).
timeout "$guest_life_s" ip netns exec "$ns" qemu-system-x86_64 -accel tcg -m 512 -smp 1 \
  -nographic -nodefaults -no-reboot -kernel "$(rxe_boot_image "$kernel" "$out")" -initrd "$out/initrd.cpio" \
  -append "console=ttyS0 quiet loglevel=5 panic=-1 softhca.ip=$guest_ip/24" \
  -serial "file:$out/console.log" -serial "pipe:$out/ctl" \
  -netdev "tap,id=n0,ifname=$tap,script=no,downscript=no" -device "virtio-net-pci,netdev=n0,romfile=" \
  >"$out/qemu.log" 2>&1 &
qemu_pid=$!
exec {ctl_w}<>"$out/ctl.in" {ctl_r}<>"$out/ctl.out"  # read-write: never blocks on a FIFO

guest_failed() {
  echo "FAIL: $1"
  echo "--- qemu"; cat "$out/qemu.log"
  echo "--- guest console (last 30 lines)"; tail -n 30 "$out/console.log" 2>/dev/null
  exit 1
}
t0=$SECONDS
gid_index=""
while read -r -t "$boot_timeout_s" -u "$ctl_r" line; do
  case $line in
    "ready "*) gid_index=${line#ready }; break ;;
    "fail "*) guest_failed "the guest could not set rxe up: ${line#fail }" ;;
  esac
done
[[ -n $gid_index ]] || guest_failed "the guest did not report rxe0 within $boot_timeout_s s"
echo "guest: kernel $kernel, rxe0 up on $guest_ip after $((SECONDS - t0)) s (RoCE v2 GID index $gid_index)"

# ---- the control channel ----
next_id=0
resent=0
# The serial channel may lose a line (rxe_guest.sh), so each command is sent again when its answer
# does not come; the guest answers a repeated command the same way, and an answer to another job, or
# a second answer, is skipped.
guest_start() {  # guest_start COMMAND...: sets guest_job
  next_id=$((next_id + 1))
  guest_job="j$next_id"
  local line try
  for try in 1 2 3; do
    ((try > 1)) && resent=$((resent + 1))
    echo "start $guest_job $run_timeout_s $*" >&"$ctl_w"
    while read -r -t 20 -u "$ctl_r" line; do
      [[ $line == "started $guest_job" ]] && return 0
    done
  done
  echo "(the guest did not take $guest_job: $*)" >&2
}
guest_wait() {  # guest_wait JOB OUTPUT_FILE: exit code in guest_rc
  local job=$1 file=$2 line
  : >"$file"
  guest_rc=124
  # The job ends within run_timeout_s of its start (the guest's `timeout -s KILL`), but a process in
  # the kernel (rxe tearing a QP down) dies only once it leaves it, and TCG on a loaded machine is
  # slow: allow as much again. The question is asked again after 30 s without a line.
  local deadline=$((SECONDS + 2 * run_timeout_s + 60))
  echo "wait $job" >&"$ctl_w"
  while ((SECONDS < deadline)); do
    if ! read -r -t 30 -u "$ctl_r" line; then
      resent=$((resent + 1))
      echo "wait $job" >&"$ctl_w"
      continue
    fi
    case $line in
      "out $job "*) echo "${line#out "$job" }" >>"$file" ;;
      "out $job") echo >>"$file" ;;
      "rc $job "*) guest_rc=${line#rc "$job" }; return 0 ;;
    esac
  done
  echo "(no answer from the guest for $job)" >>"$file"
}
guest_run() {  # guest_run OUTPUT_FILE COMMAND...
  local file=$1
  shift
  guest_start "$@"
  guest_wait "$guest_job" "$file"
}

# Waits (20 s at most) until the guest listens on TCP port $1 (the programs' out-of-band exchange).
guest_wait_tcp() {
  guest_run "$out/probe" "i=0; while [ \$i -lt 200 ]; do grep -qi ':$(printf '%04X' "$1") [0-9A-F:]* 0A' /proc/net/tcp && exit 0; i=\$((i+1)); sleep 0.1; done; exit 1"
  [[ $guest_rc -eq 0 ]]
}
# Waits (20 s at most) until an rdma_cm id listens in the guest (iproute2's rdma tool).
guest_wait_cm() {
  guest_run "$out/probe" "i=0; while [ \$i -lt 200 ]; do rdma resource show cm_id 2>/dev/null | grep -q LISTEN && exit 0; i=\$((i+1)); sleep 0.1; done; exit 1"
  [[ $guest_rc -eq 0 ]]
}

host_cmd() {  # host_cmd NAME [VAR=VALUE...]: sets cmd to `softhca run` on the host end, stats to $out/NAME.json
  local name=$1
  shift
  cmd=(timeout "$run_timeout_s" ip netns exec "$ns" env "${run_env[@]}" "$@" "$softhca" run --lib-dir "$lib_dir"
    --fabric "rxe$tag" --link roce --ip "$host_ip" --stats "$out/$name.json" --pcap "$out/$name.pcap" --)
}

failures=0
passes=0
# check NAME SIDE EXIT_CODE FILE EXPECT_REGEX...: the side exited 0 and printed every regex.
check() {
  local name=$1 side=$2 code=$3 file=$4 re ok=1
  shift 4
  if [[ $code -ne 0 ]]; then echo "FAIL: $name: $side exited $code"; ok=0; fi
  for re in "$@"; do
    grep -Eq -- "$re" "$file" || { echo "FAIL: $name: $side printed nothing matching /$re/"; ok=0; }
  done
  return $((1 - ok))
}
# tshark_clean FILE: tshark reads the capture without an error and finds no malformed packet and no
# expert item of severity error (8388608: PI_ERROR); prints what it found otherwise.
tshark_clean() {
  local bad
  if ! bad=$(tshark -r "$1" -Y '_ws.malformed || _ws.expert.severity >= 8388608' 2>"$out/tshark.err"); then
    echo "tshark could not read $(basename "$1"): $(cat "$out/tshark.err")"
    return 1
  fi
  [[ -z $bad ]] && return 0
  echo "$bad" | head -n 5
  return 1
}
# report NAME OK: the stats check and softhca's capture, then both sides' output on failure.
report() {
  local name=$1 ok=$2
  if [[ -f $out/$name.json ]]; then
    "$stats_check" "$out/$name.json" >"$out/stats" 2>&1 || { echo "FAIL: $name: softhca's counters"; cat "$out/stats"; ok=0; }
  else
    echo "FAIL: $name: softhca wrote no --stats dump"
    ok=0
  fi
  tshark_clean "$out/$name.pcap" >"$out/tshark" || { echo "FAIL: $name: softhca's --pcap"; cat "$out/tshark"; ok=0; }
  if ((ok)); then
    passes=$((passes + 1))
    echo "ok      $name"
  else
    failures=$((failures + 1))
    echo "--- $name: rxe (guest) side"; cat "$out/guest"
    echo "--- $name: softhca (host) side"; cat "$out/host"
    echo "--- $name: the last packets of softhca's capture"; tshark -r "$out/$name.pcap" 2>&1 | tail -n 16
  fi
}

# rxe_server NAME PORT KIND GUEST_ARGS HOST_ARGS SERVER_REGEX CLIENT_REGEX: the guest serves (KIND
# tcp or cm: how to see it listen), the host connects to it; each side must pass check with its regex.
# out_of_time NAME: true (and the run counted as failed) once no run may start any more.
out_of_time() {
  ((SECONDS < runs_until_s)) && return 1
  echo "FAIL: $1: not run, the test's time is up (${runs_until_s} s)"
  failures=$((failures + 1))
}
rxe_server() {
  local name=$1 port=$2 kind=$3 gargs=$4 hargs=$5 server_re=$6 client_re=$7 ok=1 host_rc
  out_of_time "$name" && return
  guest_start "$gargs"
  local job=$guest_job
  if [[ $kind == tcp ]] && ! guest_wait_tcp "$port"; then echo "FAIL: $name: the rxe server never listened"; ok=0; fi
  if [[ $kind == cm ]] && ! guest_wait_cm; then echo "FAIL: $name: the rxe server never listened"; ok=0; fi
  host_cmd "$name"
  # shellcheck disable=SC2086  # the argument strings are word lists
  "${cmd[@]}" $hargs >"$out/host" 2>&1
  host_rc=$?
  guest_wait "$job" "$out/guest"
  check "$name" "rxe server" "$guest_rc" "$out/guest" "$server_re" || ok=0
  check "$name" "softhca client" "$host_rc" "$out/host" "$client_re" || ok=0
  report "$name" "$ok"
}

# rxe_client NAME PORT KIND GUEST_ARGS HOST_ARGS SERVER_REGEX CLIENT_REGEX: softhca serves, the
# guest connects.
rxe_client() {
  local name=$1 port=$2 kind=$3 gargs=$4 hargs=$5 server_re=$6 client_re=$7 ok=1 server_pid host_rc
  out_of_time "$name" && return
  rm -f "$out/listening"
  if [[ $kind == cm ]]; then  # the server's rdma_listen appends a line to $out/listening
    local preload=$shim e
    for e in "${run_env[@]}"; do [[ $e == LD_PRELOAD=* ]] && preload="${e#LD_PRELOAD=}:$shim"; done
    host_cmd "$name" SOFTHCA_TEST_LISTENING="$out/listening" LD_PRELOAD="$preload"
  else
    host_cmd "$name"
  fi
  # shellcheck disable=SC2086
  "${cmd[@]}" $hargs >"$out/host" 2>&1 &
  server_pid=$!
  pids_to_kill+=("$server_pid")
  local deadline=$((SECONDS + 20)) ready=0
  while ((SECONDS < deadline)) && kill -0 "$server_pid" 2>/dev/null; do
    if [[ $kind == cm ]]; then
      [[ -s $out/listening ]] && { ready=1; break; }
    elif ip netns exec "$ns" awk -v p=":$(printf '%04X' "$port")" '$4 == "0A" && $2 ~ p"$" { f = 1 } END { exit !f }' \
        /proc/net/tcp 2>/dev/null; then
      ready=1
      break
    fi
    sleep 0.05
  done
  ((ready)) || { echo "FAIL: $name: the softhca server never listened"; ok=0; }
  guest_run "$out/guest" "$gargs"
  wait "$server_pid"
  host_rc=$?
  check "$name" "rxe client" "$guest_rc" "$out/guest" "$client_re" || ok=0
  check "$name" "softhca server" "$host_rc" "$out/host" "$server_re" || ok=0
  report "$name" "$ok"
}

g=$gid_index
# ibv_*_pingpong print "N bytes in S seconds" with N = 2 x size x iterations, and -c checks the data.
rc_bytes="^$((2 * 4096 * iters)) bytes in "
ud_bytes="^$((2 * 512 * iters)) bytes in "
perftest_row='^ *[0-9]+ +[0-9]+ +[0-9.]+'
p=$((20000 + tag % 20000))

both() {  # both NAME PORT KIND GUEST_SERVER HOST_CLIENT GUEST_CLIENT HOST_SERVER SERVER_RE CLIENT_RE
  rxe_server "$1.rxe_server" "$2" "$3" "$4" "$5" "$8" "$9"
  rxe_client "$1.rxe_client" $(($2 + 1)) "$3" "$6" "$7" "$8" "$9"
}
p=$((p + 2))
# The whole wire, as the tap sees it: checked after the runs (tshark_clean, and the wire rules).
ip netns exec "$ns" tshark -i "$tap" -w "$out/wire.pcap" -q >"$out/tshark-live.log" 2>&1 &
tshark_pid=$!
pids_to_kill+=("$tshark_pid")
for _ in $(seq 100); do [[ -s $out/wire.pcap ]] && break; sleep 0.1; done

both rc_pingpong $p tcp \
  "ibv_rc_pingpong -d rxe0 -g $g -p $p -n $iters -s 4096 -c" "ibv_rc_pingpong -g 0 -p $p -n $iters -s 4096 -c $guest_ip" \
  "ibv_rc_pingpong -d rxe0 -g $g -p $((p + 1)) -n $iters -s 4096 -c $host_ip" "ibv_rc_pingpong -g 0 -p $((p + 1)) -n $iters -s 4096 -c" \
  "$rc_bytes" "$rc_bytes"
p=$((p + 2))
both uc_pingpong $p tcp \
  "ibv_uc_pingpong -d rxe0 -g $g -p $p -n $iters -s 4096 -c" "ibv_uc_pingpong -g 0 -p $p -n $iters -s 4096 -c $guest_ip" \
  "ibv_uc_pingpong -d rxe0 -g $g -p $((p + 1)) -n $iters -s 4096 -c $host_ip" "ibv_uc_pingpong -g 0 -p $((p + 1)) -n $iters -s 4096 -c" \
  "$rc_bytes" "$rc_bytes"
p=$((p + 2))
both ud_pingpong $p tcp \
  "ibv_ud_pingpong -d rxe0 -g $g -p $p -n $iters -s 512 -c" "ibv_ud_pingpong -g 0 -p $p -n $iters -s 512 -c $guest_ip" \
  "ibv_ud_pingpong -d rxe0 -g $g -p $((p + 1)) -n $iters -s 512 -c $host_ip" "ibv_ud_pingpong -g 0 -p $((p + 1)) -n $iters -s 512 -c" \
  "$ud_bytes" "$ud_bytes"
# perftest: both sides print the result table, but the passive servers of ib_read_lat and
# ib_atomic_lat (perftest measures on the client only), which print their banner.
for prog in "ib_write_lat -s 64" "ib_read_lat -s 64 -o 16" "ib_atomic_lat -o 16" "ib_send_bw -s 4096"; do
  name=${prog%% *}
  server_re=$perftest_row
  [[ $name == ib_read_lat ]] && server_re="RDMA_Read Latency Test"
  [[ $name == ib_atomic_lat ]] && server_re="Atomic .* Latency Test"
  p=$((p + 2))
  both "$name" $p tcp \
    "$prog -d rxe0 -x $g -p $p -n $iters" "$prog -x 0 -p $p -n $iters $guest_ip" \
    "$prog -d rxe0 -x $g -p $((p + 1)) -n $iters $host_ip" "$prog -x 0 -p $((p + 1)) -n $iters" \
    "$server_re" "$perftest_row"
done
# rdma_cm (IB CM MADs on QP1 on the kernel side): rping -v prints each of the -C pings it exchanged;
# ucmatose sends -C messages each way and says "test complete".
p=$((p + 2))
both rping $p cm \
  "rping -s -a $guest_ip -p $p -C 10 -v" "rping -c -a $guest_ip -p $p -C 10 -v" \
  "rping -c -a $host_ip -p $((p + 1)) -C 10 -v" "rping -s -a $host_ip -p $((p + 1)) -C 10 -v" \
  "ping data: rdma-ping-9: " "ping data: rdma-ping-9: "
p=$((p + 2))
both ucmatose $p cm \
  "ucmatose -b $guest_ip -p $p -c 1 -C 10" "ucmatose -s $guest_ip -p $p -c 1 -C 10" \
  "ucmatose -s $host_ip -p $((p + 1)) -c 1 -C 10" "ucmatose -b $host_ip -p $((p + 1)) -c 1 -C 10" \
  "test complete" "test complete"

sleep 1  # the last packets into the capture
kill -INT "$tshark_pid" 2>/dev/null
wait "$tshark_pid" 2>/dev/null
# wire_count FILTER: packets of the tap's capture that match the display filter.
wire_count() { tshark -r "$out/wire.pcap" -Y "$1" 2>/dev/null | wc -l; }
wire_check() {  # wire_check WHAT TEST: counted as one more pass or failure
  if eval "$2"; then passes=$((passes + 1)); echo "ok      wire: $1"; else failures=$((failures + 1)); echo "FAIL: wire: $1"; fi
}
ours="ip.src == $host_ip && udp.dstport == 4791 && !icmp"
theirs="ip.src == $guest_ip && udp.dstport == 4791 && !icmp"
n_ours=$(wire_count "$ours")
n_theirs=$(wire_count "$theirs")
echo "wire: $n_ours RoCEv2 packets from softhca, $n_theirs from rxe"
wire_check "the capture of the tap is tshark-clean" 'tshark_clean "$out/wire.pcap"'
wire_check "softhca sent RoCEv2 packets and rxe answered" '((n_ours > 0 && n_theirs > 0))'
wire_check "every softhca packet has the kernel's TTL ($(cat /proc/sys/net/ipv4/ip_default_ttl)), none the hop limit 1" \
  '(($(wire_count "$ours && ip.ttl != $(ip netns exec "$ns" cat /proc/sys/net/ipv4/ip_default_ttl)") == 0))'
wire_check "every softhca packet comes from an entropy port 0xC000-0xC00F" \
  '(($(wire_count "$ours && (udp.srcport < 49152 || udp.srcport > 49167)") == 0))'
wire_check "rxe numbers its packets (IPv4 identification not 0), which softhca accepted" \
  '(($(wire_count "$theirs && ip.id != 0") > 0))'

if ((failures > 0)); then
  echo "--- guest console (last 80 lines: the kernel's warnings and errors, the control loop's steps)"
  tail -n 80 "$out/console.log"
fi
echo "$passes passed, $failures failed (softhca with Linux rxe, guest kernel $kernel, $((SECONDS - t0)) s; $resent commands sent to the guest again)"
((failures == 0))
