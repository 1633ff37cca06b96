# A Linux guest with Soft-RoCE (rdma_rxe) for the interop test rxe_interop.sh (sourced, not run).
# build_rxe_initramfs writes an uncompressed cpio initramfs from this machine's own Debian packages:
# busybox-static, the kernel's modules for virtio-net, rdma_rxe and rdma_ucm (with their
# dependencies, from modules.dep), and the rdma-core user space of the Debian packages
# libibverbs1, ibverbs-providers (the rxe provider), librdmacm1, ibverbs-utils, perftest,
# rdmacm-utils and iproute2's `rdma`, with every shared library they need (from ldd, and libgcc_s). Its /init
# brings up eth0 with the address given on the kernel command line, adds rxe0 on it and then serves
# a control channel on the second serial port (ttyS1), one line per command:
#   start ID SECONDS COMMAND...   runs COMMAND in the background under `timeout SECONDS`, answers
#                                 "started ID" (again, and nothing else, for an ID it has started)
#   wait ID                       waits for it (SECONDS / 2 more at most, on the guest's clock), answers
#                                 "out ID LINE" per output line, then "rc ID N"; a job still running then
#                                 is killed, with its processes' kernel stacks, rxe0's counters and
#                                 dmesg added to its output
#   stop                          powers the guest off
# A line the loop cannot read is logged on the console and ignored; the host asks again when no
# answer comes (rxe_interop.sh), so every command may arrive twice.
# The guest announces "ready GID_INDEX" (the index of rxe0's RoCE v2 GID of its IPv4 address) once
# rxe0 is up, or "fail WHAT".

# rxe_kernel_release: the newest kernel of /boot that has modules and an rdma_rxe module; empty if none.
rxe_kernel_release() {
  local k rel
  for k in $(ls -1 /boot/vmlinuz-* 2>/dev/null | sort -rV); do
    rel=${k#/boot/vmlinuz-}
    [[ -r $k && -f /lib/modules/$rel/modules.dep ]] || continue
    grep -q '/rdma_rxe\.ko' "/lib/modules/$rel/modules.dep" || continue
    echo "$rel"
    return
  done
}

# _rxe_module_order REL MODULE...: the modules' .ko paths (relative to /lib/modules/REL), each after
# the modules it depends on, each once.
_rxe_module_order() {
  local rel=$1
  shift
  awk -v want="$*" '
    { sub(":", "", $1); path[$1] = $1; deps[$1] = ""; for (i = 2; i <= NF; i++) deps[$1] = deps[$1] " " $i
      n = split($1, parts, "/"); name = parts[n]; sub(/\.ko.*$/, "", name); gsub("-", "_", name); byname[name] = $1 }
    function visit(p,   d, i, n) {
      if (p in seen) return
      seen[p] = 1
      n = split(deps[p], d, " ")
      for (i = n; i >= 1; i--) visit(d[i])
      print p
    }
    END { n = split(want, w, " "); for (i = 1; i <= n; i++) { if (!(w[i] in byname)) { print "missing " w[i] > "/dev/stderr"; exit 1 } visit(byname[w[i]]) } }
  ' "/lib/modules/$rel/modules.dep"
}

# _rxe_copy_with_libs ROOT FILE...: copies each file to the same path under ROOT, with the shared
# libraries ldd names for it (and the dynamic loader).
_rxe_copy_with_libs() {
  local root=$1 f lib
  shift
  for f in "$@"; do
    mkdir -p "$root$(dirname "$f")"
    cp -L "$f" "$root$f"
    for lib in $(ldd "$f" 2>/dev/null | awk '/=> \// { print $3 } $1 ~ /^\// && /ld-linux/ { print $1 }'); do
      [[ -e $root$lib ]] && continue
      mkdir -p "$root$(dirname "$lib")"
      cp -L "$lib" "$root$lib"
    done
  done
}

# rxe_boot_image REL DIR: the kernel image for qemu's -kernel, written to DIR when it can be: the
# uncompressed ELF inside Debian's xz bzImage, which qemu starts at its PVH entry (CONFIG_PVH), so the
# guest skips decompressing itself under TCG (seconds); else the bzImage itself.
rxe_boot_image() {
  local rel=$1 dir=$2 image=/boot/vmlinuz-$1 off
  off=$(LC_ALL=C grep -obUaP '\xfd7zXZ\x00' "$image" 2>/dev/null | head -n 1 | cut -d: -f1)
  if [[ -n $off ]] && grep -q '^CONFIG_PVH=y' "/boot/config-$rel" 2>/dev/null; then
    tail -c +$((off + 1)) "$image" | xz -dc >"$dir/vmlinux" 2>/dev/null  # trailing bytes: xz says so, fine
    if [[ $(head -c 4 "$dir/vmlinux" 2>/dev/null | od -An -c | tr -d ' ') == 177ELF ]]; then
      echo "$dir/vmlinux"
      return
    fi
  fi
  echo "$image"
}

# build_rxe_initramfs REL OUT: writes the initramfs for kernel REL to OUT. 1 (with a line saying
# what) when a file it needs is missing.
build_rxe_initramfs() {
  local rel=$1 out=$2 root m p
  root=$(mktemp -d)
  local -a programs=(/usr/bin/ibv_rc_pingpong /usr/bin/ibv_uc_pingpong /usr/bin/ibv_ud_pingpong /usr/bin/ibv_devinfo
    /usr/bin/ib_write_lat /usr/bin/ib_read_lat /usr/bin/ib_atomic_lat /usr/bin/ib_send_bw /usr/bin/rping
    /usr/bin/ucmatose /usr/bin/rdma)
  local -a provider=(/usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav34.so)
  for p in /bin/busybox "${programs[@]}" "${provider[@]}" /etc/libibverbs.d/rxe.driver; do
    [[ -e $p ]] || { echo "missing $p"; rm -rf "$root"; return 1; }
  done
  # (grep reads the whole list: with -q it would stop early, and busybox's SIGPIPE fail the pipeline)
  busybox --list 2>/dev/null | grep -x insmod >/dev/null ||
    { echo "/bin/busybox has no insmod (busybox-static?)"; rm -rf "$root"; return 1; }
  mkdir -p "$root"/{bin,dev,proc,sys,tmp,etc/libibverbs.d,lib/modules}
  cp /bin/busybox "$root/bin/busybox"
  # libgcc_s is not linked but loaded by glibc's pthread_exit and pthread_cancel (rping exits its
  # threads that way).
  local libgcc=/lib/x86_64-linux-gnu/libgcc_s.so.1  # Debian's libgcc-s1 (essential)
  [[ -f $libgcc ]] || { echo "missing $libgcc"; rm -rf "$root"; return 1; }
  _rxe_copy_with_libs "$root" "${programs[@]}" "${provider[@]}"
  mkdir -p "$root$(dirname "$libgcc")"
  cp -L "$libgcc" "$root$libgcc"
  cp /etc/libibverbs.d/rxe.driver "$root/etc/libibverbs.d/"
  m=$(_rxe_module_order "$rel" virtio_pci virtio_net crc32_generic rdma_rxe rdma_ucm) || { rm -rf "$root"; return 1; }
  : >"$root/modules.order"
  for p in $m; do
    cp "/lib/modules/$rel/$p" "$root/lib/modules/"
    echo "$(basename "$p")" >>"$root/modules.order"
  done
  _rxe_write_init "$root/init"
  (cd "$root" && find . | cpio -o -H newc --quiet) >"$out"
  local rc=$?
  rm -rf "$root"
  return $rc
}

# The guest's /init (busybox sh). The address comes from the kernel command line: softhca.ip=A/B.
_rxe_write_init() {
  cat >"$1" <<'EOF'
#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin:/usr/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp
exec 3<>/dev/ttyS1
stty raw -echo <&3
say() { echo "$*" >&3; }
log() { read -r up _ </proc/uptime; echo "softhca-guest: [$up] $*" >/dev/console; }  # the console log, for a failure report
for m in $(cat /modules.order); do insmod "/lib/modules/$m" || { say "fail insmod $m"; poweroff -f; }; done
ip=""
for a in $(cat /proc/cmdline); do case $a in softhca.ip=*) ip=${a#softhca.ip=} ;; esac; done
: >/dev/null
ip link set lo up
ip link set eth0 up && ip addr add "$ip" dev eth0 || { say "fail eth0 $ip"; poweroff -f; }
rdma link add rxe0 type rxe netdev eth0 || { say "fail rdma link add"; poweroff -f; }
want="0000:0000:0000:0000:0000:ffff:$(echo "${ip%/*}" | awk -F. '{ printf "%02x%02x:%02x%02x", $1, $2, $3, $4 }')"
gidx=""
port=/sys/class/infiniband/rxe0/ports/1
# The table has 1024 entries and fills from 0: look at the first 16, with builtins only (a fork
# costs milliseconds under TCG).
for i in $(seq 0 50); do
  for n in 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15; do
    read -r t <"$port/gid_attrs/types/$n" 2>/dev/null || continue
    [ "$t" = "RoCE v2" ] || continue
    read -r g <"$port/gids/$n"
    [ "$g" = "$want" ] && { gidx=$n; break; }
  done
  [ -n "$gidx" ] && break
  sleep 0.1
done
[ -n "$gidx" ] || { say "fail no RoCE v2 GID $want"; poweroff -f; }
say "ready $gidx"
set -f  # a command's words are split here, never globbed: its own sh -c expands them
# The loop runs in a child of init, and each job is forked twice so that init (which inherits the
# orphan) is its parent, not the loop: a job that ends sends the loop no SIGCHLD, which would interrupt
# its read of the channel, and ash restarts an interrupted read afresh, dropping the part of the line
# it had read (a lost "wait" hung the host for minutes).
serve() {
while IFS= read -r line <&3; do
  set -- $line
  verb=${1:-}
  case $verb in
    start)
      id=$2; secs=$3; shift 3
      if [ ! -f "/tmp/$id.job" ]; then
        ( ( timeout -s KILL "$secs" sh -c "$*" >"/tmp/$id.out" 2>&1; echo $? >"/tmp/$id.rc" ) & echo $! >"/tmp/$id.pid" )
        read -r pid <"/tmp/$id.pid"
        read -r up _ </proc/uptime
        echo "$pid $secs ${up%.*}" >"/tmp/$id.job"
        log "start $id: $*"
      fi
      say "started $id"
      ;;
    wait)
      # Half as long again as the job's own timeout at most: a job that outlives its SIGKILL is stuck in
      # the kernel; what runs is shown, what can be killed is, and the loop goes on.
      # The bound is the guest's clock (/proc/uptime, a builtin read), not a count of sleeps: a sleep
      # takes far longer than asked under a loaded TCG.
      id=$2
      if [ ! -f "/tmp/$id.job" ]; then
        log "wait $id: never started"
        say "out $id (the guest never started $id)"
        say "rc $id 125"
        continue
      fi
      read -r pid secs started <"/tmp/$id.job"
      log "wait $id"
      until=$((started + secs + secs / 2))
      next_note=$((started + 30))
      while [ ! -f "/tmp/$id.rc" ]; do
        read -r up _ </proc/uptime
        up=${up%.*}
        [ "$up" -ge "$until" ] && break
        [ "$up" -ge "$next_note" ] && { log "$id still running after $((up - started)) s"; next_note=$((up + 30)); }
        sleep 0.1
      done
      if [ ! -f "/tmp/$id.rc" ]; then
        { echo "(still running past its timeout; the guest's processes, where each waits, rxe0's counters and the kernel's last words:)"
          ps -o pid,stat,args 2>/dev/null || ps
          set +f
          for d in /proc/[0-9]*; do  # user processes (kernel threads have no exe) but the shell's own
            [ -e "$d/exe" ] || continue
            read -r st <"$d/stat" 2>/dev/null || continue
            case $st in "1 "*|*"(sh)"*|*"(busybox)"*|*"(timeout)"*|*"(ps)"*|*"(awk)"*) continue ;; esac
            echo "${d#/proc/}: $(cat "$d/comm" 2>/dev/null) wchan=$(cat "$d/wchan" 2>/dev/null)"
            head -n 12 "$d/stack" 2>/dev/null
          done
          for c in /sys/class/infiniband/rxe0/ports/1/hw_counters/*; do
            read -r v <"$c" 2>/dev/null && [ "$v" != 0 ] && echo "rxe0 ${c##*/} $v"
          done
          set -f
          dmesg | tail -n 20
        } >>"/tmp/$id.out" 2>&1
        for c in $(pgrep -P "$pid"); do pkill -9 -P "$c"; kill -9 "$c"; done
        kill -9 "$pid"
        echo 137 >"/tmp/$id.rc"
      fi
      log "rc $id $(cat "/tmp/$id.rc")"
      # awk ends every line, a last one without its newline too: "rc" must start a line of its own.
      awk -v p="out $id " '{ print p $0 }' "/tmp/$id.out" >&3
      say "rc $id $(cat "/tmp/$id.rc")"
      ;;
    stop) poweroff -f ;;
    *) log "ignored a line it could not read: '$line'" ;;
  esac
done
}
( serve )
poweroff -f
EOF
  chmod +x "$1"
}
