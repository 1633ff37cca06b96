# Checks of perftest's output shared by perftest.sh and netns_perftest.sh (sourced, not run).

# perftest's own defaults (perftest 4.5 src/perftest_parameters.c): 5000 iterations for the
# bandwidth tests, 1000 for the latency tests; one QP. -a runs the sizes 2^1 .. 2^23.
readonly perftest_all_sizes=23

# perftest_parse_args PROGRAM ARGS...: sets perftest_iters (-n per QP), perftest_qps (-q) and
# perftest_all (1 with -a) from the arguments perftest will get.
perftest_parse_args() {
  local program=$1 prev="" arg
  shift
  perftest_iters="" perftest_qps=1 perftest_all=0
  for arg in "$@"; do
    case $prev in
      -n|--iters) perftest_iters=$arg ;;
      -q|--qp) perftest_qps=$arg ;;
    esac
    case $arg in
      -a|--all) perftest_all=1 ;;
      --iters=*) perftest_iters=${arg#*=} ;;
      --qp=*) perftest_qps=${arg#*=} ;;
    esac
    prev=$arg
  done
  if [[ -z $perftest_iters ]]; then
    if [[ $program == *_bw ]]; then perftest_iters=5000; else perftest_iters=1000; fi
  fi
}

# The number of numeric rows after the last "#bytes" header line of FILE (perftest prints the
# header once per table; each row starts with the message size and the iterations); -1 with no
# header.
perftest_result_rows() {
  awk '/^ *#bytes/ { rows = 0; seen = 1; next }
       seen && /^ *[0-9]+ +[0-9]/ { rows++ }
       END { print seen ? rows : -1 }' "$1"
}

# perftest_check_side PROGRAM SIDE EXIT_CODE OUTPUT_FILE: SIDE (server or client) exited 0 and
# printed its result table (with -a, perftest_parse_args first: the client one row per size).
# Prints a FAIL line per problem; 0 when there is none.
perftest_check_side() {
  local program=$1 side=$2 code=$3 file=$4 rows rc=0
  if [[ $code -ne 0 ]]; then echo "FAIL: $side exited $code"; rc=1; fi
  # The server of ib_read_lat and ib_atomic_lat is passive (its memory is the target, it posts
  # nothing): perftest prints the table on the client only.
  [[ $side == server && $program =~ _(read|atomic)_lat$ ]] && return $rc
  rows=$(perftest_result_rows "$file")
  if ((rows < 1)); then
    echo "FAIL: $side printed no result table (#bytes header and numeric rows)"
    rc=1
  elif [[ $side == client ]] && ((perftest_all == 1 && rows != perftest_all_sizes)); then
    # With -a the passive server of ib_write_bw and ib_read_bw prints the last size only; the
    # client, which measures, prints every size.
    echo "FAIL: $side printed $rows result rows for -a, expected $perftest_all_sizes (2 B .. 8 MiB)"
    rc=1
  fi
  return $rc
}
