#!/usr/bin/env bash
# The Debian consumers of librdmacm resolve against softhca's libraries when bound at once:
#   rdmacm_bind_now.sh LIB_DIR IMPORTS_FILE
# IMPORTS_FILE (tests/unit/verbs/abi-data/librdmacm-imports.txt) lists the consumers ("== PATH
# NEEDED: ...", then the symbol@(VERSION)s each imports): rdmacm-utils, perftest, qperf,
# libfabric, UCX, pyverbs. For each one installed, with LD_LIBRARY_PATH=LIB_DIR:
#   - `ldd -r` (every relocation processed, as BIND_NOW does) maps librdmacm.so.1 and
#     libibverbs.so.1 to LIB_DIR's and reports no missing version and no undefined rdma_cm or
#     verbs symbol (a Python extension's own libpython symbols are not ours to provide);
#   - the programs of the acceptance runs (rping, ucmatose, udaddy, rdma_server, rdma_client,
#     perftest, qperf) start with LD_BIND_NOW=1 and print their usage (`-h`, qperf `--help`):
#     the loader resolved every symbol before main, or it would have stopped them with "symbol
#     lookup error" (exit 127).
# Exits 77 (skipped) when none of the consumers is installed.
set -uo pipefail
lib_dir=${1:?usage: $0 LIB_DIR IMPORTS_FILE}
imports=${2:?usage: $0 LIB_DIR IMPORTS_FILE}
for lib in librdmacm.so.1 libibverbs.so.1; do
  [[ -f $lib_dir/$lib ]] || { echo "FAIL: no $lib_dir/$lib"; exit 1; }
done
# A sanitizer build of our libraries needs its runtime loaded first. ThreadSanitizer's cannot be
# preloaded into the loader's listing mode (ldd maps nothing then): nothing to check in that build.
if readelf -d "$lib_dir/librdmacm.so.1" | grep -q 'NEEDED.*\[libtsan\.so'; then
  echo "skipped: ldd cannot list with ThreadSanitizer's runtime preloaded (the release and ASan builds check this)"
  exit 77
fi
for runtime in libasan; do
  if readelf -d "$lib_dir/librdmacm.so.1" | grep -q "NEEDED.*\[$runtime\.so"; then
    export LD_PRELOAD=$(gcc -print-file-name="$runtime.so")
    export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0}
  fi
done
export LD_LIBRARY_PATH=$lib_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

rc=0 checked=0
fail() {
  echo "FAIL: $*"
  rc=1
}
want_rdmacm=$(readlink -f "$lib_dir/librdmacm.so.1")
want_verbs=$(readlink -f "$lib_dir/libibverbs.so.1")

while read -r consumer; do
  [[ -e $consumer ]] || { echo "(not installed: $consumer)"; continue; }
  checked=$((checked + 1))
  out=$(timeout 30 ldd -r "$consumer" 2>&1)
  for pair in "librdmacm.so.1 $want_rdmacm" "libibverbs.so.1 $want_verbs"; do
    lib=${pair%% *} want=${pair#* }
    path=$(awk -v l="$lib" '$1 == l && $2 == "=>" { print $3 }' <<<"$out")
    # libuct_ib and the pyverbs modules other than cmid need no librdmacm.
    [[ -z $path ]] && ! readelf -d "$consumer" | grep -q "NEEDED.*\[$lib\]" && continue
    [[ $(readlink -f "$path") == "$want" ]] || fail "$consumer: $lib => '$path', not $want"
  done
  missing=$(grep -E "version \`(RDMACM|IBVERBS|MLX5|EFA)_[^']*' not found|undefined symbol: (rdma_|r[a-z]+, version RDMACM|ibv_|mlx5dv_|efadv_)" <<<"$out")
  [[ -z $missing ]] || { fail "$consumer does not resolve against $lib_dir:"; echo "$missing"; }
done < <(sed -nE 's/^== ([^ ]+) .*/\1/p' "$imports")

for prog in rping ucmatose udaddy rdma_server rdma_client ib_send_lat ib_send_bw ib_write_lat \
            ib_write_bw ib_read_lat ib_read_bw ib_atomic_lat ib_atomic_bw qperf; do
  [[ -x /usr/bin/$prog ]] || continue
  opt=-h
  [[ $prog == qperf ]] && opt=--help
  out=$(LD_BIND_NOW=1 timeout 30 "/usr/bin/$prog" "$opt" </dev/null 2>&1)
  code=$?
  if [[ $code -eq 127 || $code -eq 124 ]] || grep -Eq "symbol lookup error|version \`[^']*' not found" <<<"$out"; then
    fail "$prog $opt with LD_BIND_NOW=1 (exit $code): $(head -3 <<<"$out")"
  fi
  grep -Eqi "usage|$prog" <<<"$out" || fail "$prog $opt printed no usage: $(head -3 <<<"$out")"
done

((checked > 0)) || { echo "SKIP: none of the consumers in $imports is installed"; exit 77; }
[[ $rc -eq 0 ]] && echo "PASS: $checked consumers resolve against $lib_dir with BIND_NOW"
exit $rc
