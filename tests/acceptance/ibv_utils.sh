#!/usr/bin/env bash
# Unmodified Debian ibverbs-utils against softhca's libibverbs.so.1:
#   ibv_utils.sh LIB_DIR
# Runs /usr/bin/ibv_devices and /usr/bin/ibv_devinfo -v with LD_LIBRARY_PATH=LIB_DIR (each under
# `timeout 30`) and checks that both exit 0 and that their output shows softhca_0 with its node
# GUID (the same in both), port 1 PORT_ACTIVE, link layer InfiniBand and a non-zero LID.
# Exits 77 (skipped) when ibverbs-utils is not installed.
set -uo pipefail

lib_dir=${1:?usage: $0 LIB_DIR}
devices=/usr/bin/ibv_devices
devinfo=/usr/bin/ibv_devinfo
if [[ ! -x $devices || ! -x $devinfo ]]; then
  echo "SKIP: ibverbs-utils ($devices, $devinfo) is not installed"
  exit 77
fi
[[ -f $lib_dir/libibverbs.so.1 ]] || { echo "FAIL: no $lib_dir/libibverbs.so.1"; exit 1; }

export LD_LIBRARY_PATH=$lib_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# A sanitizer build of our library needs its runtime loaded first in these uninstrumented programs.
for runtime in libasan libtsan; do
  if readelf -d "$lib_dir/libibverbs.so.1" | grep -q "NEEDED.*\[$runtime\.so"; then
    export LD_PRELOAD=$(gcc -print-file-name="$runtime.so")
    export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0}
  fi
done

failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}
# expect OUTPUT REGEX WHAT: OUTPUT has a line matching the extended regex.
expect() {
  grep -Eq -- "$2" <<<"$1" || fail "$3 (no line matches /$2/)"
}

# ---- ibv_devices --------------------------------------------------------------------------------
out=$(timeout 30 "$devices" 2>&1)
rc=$?
echo "--- ibv_devices (exit $rc)"
echo "$out"
[[ $rc -eq 0 ]] || fail "ibv_devices exited $rc"
guid=$(awk '$1 == "softhca_0" { print $2 }' <<<"$out")
[[ -n $guid ]] || fail "ibv_devices does not list softhca_0"
[[ $guid =~ ^[0-9a-f]{16}$ && $guid != 0000000000000000 ]] ||
  fail "softhca_0 has no node GUID: '$guid'"

# ---- ibv_devinfo -v -----------------------------------------------------------------------------
out=$(timeout 30 "$devinfo" -v 2>&1)
rc=$?
echo "--- ibv_devinfo -v (exit $rc)"
echo "$out"
[[ $rc -eq 0 ]] || fail "ibv_devinfo -v exited $rc"
expect "$out" '^hca_id:[[:space:]]+softhca_0$' "ibv_devinfo shows hca_id softhca_0"
expect "$out" '^[[:space:]]+transport:[[:space:]]+InfiniBand' "transport InfiniBand"
if [[ ${#guid} -eq 16 ]]; then
  guid_colons="${guid:0:4}:${guid:4:4}:${guid:8:4}:${guid:12:4}"
  expect "$out" "^[[:space:]]+node_guid:[[:space:]]+$guid_colons\$" \
    "node_guid $guid_colons, as ibv_devices shows it"
fi
expect "$out" '^[[:space:]]+port:[[:space:]]+1$' "port 1"
expect "$out" '^[[:space:]]+state:[[:space:]]+PORT_ACTIVE \(4\)$' "port state PORT_ACTIVE"
expect "$out" '^[[:space:]]+link_layer:[[:space:]]+InfiniBand$' "link layer InfiniBand"
# Extended CQs (ibv_create_cq_ex timestamps, ibv_modify_cq): the device clock and moderation limits.
expect "$out" '^[[:space:]]+hca_core_clock:[[:space:]]+1000000kHZ$' "hca_core_clock 1000000 kHz (1 tick = 1 ns)"
expect "$out" '^[[:space:]]+completion timestamp_mask:[[:space:]]+0xffffffffffffffff$' "a 64-bit completion timestamp"
expect "$out" '^[[:space:]]+max_cq_count:[[:space:]]+65535$' "CQ moderation up to 65535 completions"
expect "$out" '^[[:space:]]+max_cq_period:[[:space:]]+4095 us$' "CQ moderation up to 4095 us"
# XRC (D20) and memory windows of type 1 and 2B (D24): listed among device_cap_flags, and nothing
# the device does not do (type 2A windows, fast-register memory management extensions).
expect "$out" '^[[:space:]]+XRC$' "the XRC device capability"
expect "$out" '^[[:space:]]+MEM_WINDOW$' "the memory window device capability"
expect "$out" '^[[:space:]]+MEM_WINDOW_TYPE_2B$' "type 2B memory windows"
if grep -Eq '^[[:space:]]+(MEM_WINDOW_TYPE_2A|MEM_MGT_EXTENSIONS)$' <<<"$out"; then
  fail "ibv_devinfo lists type 2A windows or memory management extensions, which softhca does not execute"
fi
lid=$(sed -nE 's/^[[:space:]]+port_lid:[[:space:]]+([0-9]+)$/\1/p' <<<"$out" | head -n1)
[[ -n $lid && $lid -ne 0 ]] || fail "port_lid is missing or zero: '$lid'"

if [[ $failures -ne 0 ]]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "ibv_devices and ibv_devinfo -v see softhca_0 (GUID $guid, LID $lid, PORT_ACTIVE, InfiniBand)"
