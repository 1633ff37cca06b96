#!/usr/bin/env bash
# Checks the dynamic symbol table of one of our drop-in libraries against rdma-core 44's ABI:
#   check_abi_symbols.sh ibverbs|mlx5|efa|rdmacm LIBRARY ABI_DATA_DIR
# Proves, from `readelf --dyn-syms -W` and `readelf -V` of the built library:
#   1. its SONAME is libNAME.so.1;
#   2. every symbol@version that the target programs import (ABI_DATA_DIR/*_union.tsv) is exported
#      with exactly that version (for ibverbs: the rows whose consumers are perftest, the utilities,
#      pyverbs or librdmacm; the rows only the real libmlx5/libefa import are IBVERBS_PRIVATE_34
#      internals that our stubs replace; for rdmacm also every import of the Debian programs in
#      ABI_DATA_DIR/librdmacm-imports.txt: rdmacm-utils, perftest, qperf, libfabric, UCX, pyverbs);
#   3. the exported set is exactly the real library's public set (ABI_DATA_DIR/lib*_exports.txt;
#      for rdmacm the FUNC rows of librdmacm-44.symbols: 68 functions), for ibverbs plus
#      IBVERBS_PRIVATE_34 { ibv_query_gid_type } and no other private symbol;
#   4. nothing else is exported: no unversioned symbol, no C++ symbol, no symbol in a foreign node;
#   5. the version nodes are exactly the real library's, each public node inheriting the previous,
#      and each has its node marker (an OBJECT ABS symbol named after it, as GNU ld emits).
# Exits 0 when all hold, 1 with one line per violation otherwise.
set -euo pipefail

if [[ $# -ne 3 ]]; then
  echo "usage: $0 ibverbs|mlx5|efa|rdmacm LIBRARY ABI_DATA_DIR" >&2
  exit 2
fi
name=$1 lib=$2 data=$3
failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

case $name in
  ibverbs) prefix=IBVERBS_ union=$data/ibverbs_union.tsv exports=$data/libibverbs_exports.txt ;;
  mlx5) prefix=MLX5_ union=$data/mlx5_union.tsv exports=$data/libmlx5_exports.txt ;;
  efa) prefix=EFA_ union=$data/efa_union.tsv exports=$data/libefa_exports.txt ;;
  rdmacm) prefix=RDMACM_ union=$data/rdmacm_union.tsv exports=$data/librdmacm-44.symbols ;;
  *) echo "unknown library kind: $name" >&2; exit 2 ;;
esac
[[ -f $lib ]] || { echo "FAIL: $lib does not exist"; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The real library's public set as "VERSION SYMBOL" lines, and its version nodes. librdmacm's data
# is objdump's table (librdmacm-44.symbols: symbol, node, type, ...; the node markers are its
# OBJECT rows); the others' is readelf's "VERSION SYMBOL" (lib*_exports.txt).
if [[ $name == rdmacm ]]; then
  awk '/^#/ || NF < 3 { next } $3 == "FUNC" { print $2, $1 }' "$exports" >"$work/public"
  awk '/^#/ || NF < 3 { next } $3 == "OBJECT" && $1 == $2 { print $1 }' "$exports" >"$work/public_nodes"
else
  cp "$exports" "$work/public"
  awk '/^#/ || NF != 2 || $1 ~ /^\(/ { next } { print $1 }' "$exports" | sort -u >"$work/public_nodes"
fi

# ---- 1. SONAME ----------------------------------------------------------------------------------
soname=$(readelf -d -W "$lib" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[[ $soname == "lib$name.so.1" ]] || fail "SONAME is '$soname', expected lib$name.so.1"

# ---- the version nodes the library defines: "node parent" per line ("-": no parent) -------------
readelf -V -W "$lib" | awk '
  /Version definition section/ { in_defs = 1; next }
  /Version needs section/ { in_defs = 0 }
  in_defs && /Name:/ && !/Flags: BASE/ { node = $NF; parent[node] = ""; order[++n] = node }
  in_defs && /Parent 1:/ { parent[node] = $NF }
  END { for (i = 1; i <= n; ++i) print order[i], (parent[order[i]] == "" ? "-" : parent[order[i]]) }
' >"$work/nodes"

# ---- what the library exports: "symbol@version" per line ---------------------------------------
# readelf prints defined symbols as name@@VER (default version) or name@VER (compatibility
# version); each version definition also appears, as an OBJECT ABS entry named after the node.
readelf --dyn-syms -W "$lib" | awk -v nodes="$work/nodes" '
  BEGIN { while ((getline line < nodes) > 0) { split(line, f, " "); is_node[f[1]] = 1 } }
  $1 ~ /^[0-9]+:$/ && $7 != "UND" && ($5 == "GLOBAL" || $5 == "WEAK") && NF >= 8 {
    sym = $8; sub(/@@/, "@", sym)
    split(sym, part, "@")
    if ($4 == "OBJECT" && $7 == "ABS" && (part[1] in is_node)) next  # a version definition
    print sym
  }' | sort -u >"$work/exported"
[[ -s $work/exported ]] || fail "no exported symbols found in $lib"
# The node markers: OBJECT ABS symbols named after the nodes (name@@name).
readelf --dyn-syms -W "$lib" | awk '$1 ~ /^[0-9]+:$/ && $4 == "OBJECT" && $7 == "ABS" && NF >= 8 {
    sym = $8; sub(/@@.*/, "", sym); sub(/@.*/, "", sym); print sym }' | sort -u >"$work/markers"

# ---- 4. nothing outside our nodes, nothing unversioned, no C++ ----------------------------------
while read -r entry; do
  sym=${entry%%@*}
  ver=${entry#*@}
  if [[ $entry != *@* ]]; then
    fail "unversioned export: $entry"
  elif [[ $ver != "$prefix"* ]]; then
    fail "export in a foreign version node: $entry"
  fi
  [[ $sym == _Z* ]] && fail "C++ symbol exported: $entry"
  [[ $sym == *softhca* ]] && fail "internal symbol exported: $entry"
done <"$work/exported"

# ---- 2. every imported symbol@version is there --------------------------------------------------
awk -F'\t' -v kind="$name" '
  /^#/ || NF < 2 { next }
  {
    if (kind == "ibverbs") {
      n = split($2, consumers, ",")
      wanted = 0
      for (i = 1; i <= n; ++i) if (consumers[i] != "mlx5" && consumers[i] != "efa") wanted = 1
      if (!wanted) next
    }
    print $1
  }' "$union" | sort -u >"$work/imported"
# librdmacm-imports.txt: "== PROGRAM NEEDED: ..." then that program's imports as sym@(VERSION).
if [[ $name == rdmacm && -f $data/librdmacm-imports.txt ]]; then
  { cat "$work/imported"
    awk '/^==/ { next } { for (i = 1; i <= NF; ++i) { s = $i; gsub(/[()]/, "", s); print s } }' \
      "$data/librdmacm-imports.txt"; } | sort -u >"$work/imported.all"
  mv "$work/imported.all" "$work/imported"
fi
[[ -s $work/imported ]] || fail "no rows read from $union"
while read -r entry; do
  grep -qxF "$entry" "$work/exported" || fail "missing import: $entry"
done <"$work/imported"

# ---- 3. exactly the real library's public set ---------------------------------------------------
# Export lines are "VERSION SYMBOL"; "(VERSION) SYMBOL" marks hidden compatibility symbols of the
# real libibverbs, and "NODE NODE" its version definitions: neither is a symbol we must export.
awk -v kind="$name" '
  /^#/ || NF != 2 || $1 ~ /^\(/ || $1 == $2 { next }
  kind == "ibverbs" && $1 == "IBVERBS_PRIVATE_34" && $2 != "ibv_query_gid_type" { next }
  { print $2 "@" $1 }' "$work/public" | sort -u >"$work/expected"
[[ -s $work/expected ]] || fail "no rows read from $exports"
while read -r entry; do
  fail "exported but not in the real library's public set: $entry"
done < <(comm -23 "$work/exported" "$work/expected")
while read -r entry; do
  fail "in the real library's public set but not exported: $entry"
done < <(comm -13 "$work/exported" "$work/expected")

# ---- 5. version nodes and their inheritance -----------------------------------------------------
# Expected: the public nodes in version order, each inheriting the previous; private nodes alone.
sort -u -V "$work/public_nodes" |
  awk '/PRIVATE/ { private[++p] = $0; next }
       { if (prev == "") print $0, "-"; else print $0, prev; prev = $0 }
       END { for (i = 1; i <= p; ++i) print private[i], "-" }' | sort >"$work/expected_nodes"
sort "$work/nodes" >"$work/nodes_sorted"
while read -r line; do
  fail "unexpected version node (node parent): $line"
done < <(comm -23 "$work/nodes_sorted" "$work/expected_nodes")
while read -r line; do
  fail "missing version node (node parent): $line"
done < <(comm -13 "$work/nodes_sorted" "$work/expected_nodes")

while read -r node _; do
  grep -qxF "$node" "$work/markers" || fail "no node marker (OBJECT ABS symbol) for $node"
done <"$work/nodes"

count=$(wc -l <"$work/exported")
if [[ $failures -ne 0 ]]; then
  echo "$name: $failures violation(s) in $lib ($count exports)"
  exit 1
fi
echo "$name: $count exports, $(wc -l <"$work/imported") imported symbols and" \
  "$(wc -l <"$work/nodes") version nodes as rdma-core 44"
