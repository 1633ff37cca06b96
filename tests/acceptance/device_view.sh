#!/usr/bin/env bash
# The device view of `softhca run` (docs/device-view.md), with unmodified programs:
#   device_view.sh SOFTHCA LIB_DIR CHECK
# - CHECK (device_view_check.c) finds /dev/infiniband/uverbs0 a character device and every sysfs
#   value equal to what the verbs API says, on the InfiniBand and the Ethernet (RoCE) link layer;
# - ucx_info -d lists rc_verbs and ud_verbs on softhca_0:1; ibstat shows the port Active;
# - the user's uid is unchanged inside, and nothing of the view is left in /tmp afterwards;
# - as root, the same for an unprivileged user (uid 65534, through setpriv), whose view lives in a
#   user namespace that maps it to itself.
# Every program is bounded by a timeout; each run uses a fabric of its own.
set -uo pipefail
softhca=${1:?usage: $0 SOFTHCA LIB_DIR CHECK}
lib_dir=${2:?}
check=${3:?}
tag="dv$$"
failures=0
# shellcheck source=pingpong_lib.sh
source "$(dirname "$0")/pingpong_lib.sh"
preload_sanitizer_runtime "$lib_dir"  # for the uninstrumented ucx_info and ibstat
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
run() { timeout 60 "$softhca" run --lib-dir "$lib_dir" --fabric "$tag-$1" "${@:2}"; }
run_system() { timeout 60 env "${run_env[@]}" "$softhca" run --lib-dir "$lib_dir" --fabric "$tag-$1" "${@:2}"; }

for link in ib roce; do
  extra=()
  [[ $link == roce ]] && extra=(--link roce --ip 127.0.0.1)
  out=$(run "$link" "${extra[@]}" -- "$check" 2>&1) || fail "$link: $out"
  echo "$link: $out"
done

if command -v ucx_info > /dev/null; then
  out=$(run_system ucx -- ucx_info -d 2>&1)
  for t in rc_verbs ud_verbs; do
    grep -A3 "Transport: $t" <<< "$out" | grep -q "Device: softhca_0:1" || fail "ucx_info -d lists no $t on softhca_0:1"
  done
else
  [[ ${CI:-} == true ]] && fail "ucx_info is missing (ucx-utils)" || echo "SKIP ucx_info: not installed"
fi
if command -v ibstat > /dev/null; then
  out=$(run_system ibstat -- ibstat 2>&1)
  grep -q "State: Active" <<< "$out" && grep -q "CA 'softhca_0'" <<< "$out" || fail "ibstat: $out"
else
  [[ ${CI:-} == true ]] && fail "ibstat is missing (infiniband-diags)" || echo "SKIP ibstat: not installed"
fi

[[ $(run uid -- id -u) == "$(id -u)" ]] || fail "the uid changed inside the view"
[[ -z $(find /tmp -maxdepth 1 -name 'softhca-view-*' -user "$(id -u)" 2> /dev/null) ]] ||
  fail "a scratch directory of the view was left in /tmp"

if [[ $(id -u) == 0 ]] && command -v setpriv > /dev/null; then
  # The unprivileged user needs to reach the binaries: copies in a directory it may read.
  copy=$(mktemp -d)
  trap 'rm -rf "$copy"' EXIT
  chmod 755 "$copy"
  cp "$softhca" "$check" "$copy/"
  cp -a "$lib_dir" "$copy/lib"
  chmod -R a+rX "$copy"
  out=$(timeout 60 setpriv --reuid=65534 --regid=65534 --clear-groups \
        "$copy/softhca" run --lib-dir "$copy/lib" --fabric "$tag-nobody" -- sh -c "id -u; $copy/$(basename "$check")" 2>&1)
  echo "uid 65534: $out"
  [[ $(head -1 <<< "$out") == 65534 ]] || fail "uid 65534: the uid changed or the run failed: $out"
  grep -q "devices agree" <<< "$out" || fail "uid 65534: $out"
fi
(( failures == 0 )) && echo "PASS" || exit 1
