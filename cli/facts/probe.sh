#!/bin/sh
# modelfleet facts probe: one run per node, one SSH exec, POSIX sh, coreutils and awk (and
# python3, where the node has it, for the one thing sh cannot do: asking the engines).
# It prints raw sections; every judgement is made by cli/facts/parse.py on the control
# side, so an old probe on a node never misreads a new format. Read-only: it changes
# nothing on the node. Each section ends with its command's exit status.
PROBE_VERSION=1
SHARD_DIR=${MODELFLEET_SHARD_DIR:-/var/lib/modelfleet/shards}
# The model store: the inventory's modelfleet_model_store, passed by ctl as `sh -s -- DIR`
# (cli/facts/gather.py), read now: the shards section below resets the arguments.
MODEL_STORE=${1:-${MODELFLEET_MODEL_STORE:-/var/lib/modelfleet/models}}

begin() { printf '@@modelfleet begin %s\n' "$1"; }
end() { printf '\n@@modelfleet end %s %s\n' "$1" "$2"; }

begin version
printf '%s\n' "$PROBE_VERSION"
end version 0

# Small files are read by the shell itself: a cat is an exec, about a millisecond of the
# node's CPU each, and the probe runs on every node every pass.
copy() {
  while IFS= read -r copy_line || [ -n "$copy_line" ]; do
    printf '%s\n' "$copy_line"
  done < "$1"
}

begin meminfo
if [ -r /proc/meminfo ]; then
  copy /proc/meminfo
  end meminfo $?
else
  end meminfo 1
fi

# A container sees the host's /proc/meminfo; its cgroup limit is what it really has.
begin cgroup-memory
if [ -r /sys/fs/cgroup/memory.max ]; then
  copy /sys/fs/cgroup/memory.max
  end cgroup-memory $?
elif [ -r /sys/fs/cgroup/memory/memory.limit_in_bytes ]; then
  copy /sys/fs/cgroup/memory/memory.limit_in_bytes
  end cgroup-memory $?
else
  end cgroup-memory 127
fi

# NVIDIA devices on the PCI bus (vendor 0x10de, class 0x03xx display/3D), so "no
# nvidia-smi" on a GPU node is told apart from a node without GPUs.
begin pci-nvidia
for device in /sys/bus/pci/devices/*; do
  [ -r "$device/vendor" ] || continue
  read -r vendor < "$device/vendor" || continue
  [ "$vendor" = "0x10de" ] || continue
  read -r class < "$device/class" || class=unknown
  case "$class" in 0x03*) printf '%s %s\n' "${device##*/}" "$class" ;; esac
done
end pci-nvidia 0

# nvidia-smi with its stdout as it is and each line of its stderr marked "@@stderr ", so a
# warning never lands among the CSV rows; returns nvidia-smi's own exit status, which
# cli/facts/probe.py reads as nvidia-smi(1) documents it (6 no devices, 14 infoROM...).
# Its stderr (a line or two) is taken whole and marked by the shell, not piped through sed:
# one fork a call instead of four and an exec, a fifth of the probe's CPU on a GPU node.
smi() {
  { smi_errors=$(nvidia-smi "$@" 2>&1 1>&3 3>&-); smi_status=$?; } 3>&1
  if [ -n "$smi_errors" ]; then
    set -f
    smi_ifs=$IFS
    IFS='
'
    for smi_line in $smi_errors; do printf '@@stderr %s\n' "$smi_line"; done
    IFS=$smi_ifs
    set +f
  fi
  return "$smi_status"
}

if command -v nvidia-smi >/dev/null 2>&1; then
  # The GPUs, their MIG modes and the pages pending retirement in one run: each run of
  # nvidia-smi starts NVML afresh, tens of milliseconds of a real node's CPU. ctl reads it as
  # the three queries below would answer (cli/facts/probe.py, gpu_queries).
  begin gpus
  smi --query-gpu=index,uuid,name,pci.bus_id,memory.total,memory.used,ecc.errors.uncorrected.volatile.total,mig.mode.current,retired_pages.pending --format=csv,noheader,nounits
  gpus_status=$?
  end gpus "$gpus_status"
  # A driver that does not know a field refuses the whole query (`Field "x" is not a valid
  # field to query.`, exit 2): then each is asked apart, so that a driver older than MIG
  # (R450) loses only that field.
  if [ "$gpus_status" -eq 2 ]; then
    begin query-gpu
    smi --query-gpu=index,uuid,name,pci.bus_id,memory.total,memory.used,ecc.errors.uncorrected.volatile.total --format=csv,noheader,nounits
    end query-gpu $?
    begin mig
    smi --query-gpu=index,mig.mode.current --format=csv,noheader,nounits
    end mig $?
    begin retired-pages
    smi --query-gpu=index,retired_pages.pending --format=csv,noheader,nounits
    end retired-pages $?
  fi
  # Memory repairs a GPU waits for, asked apart (another query): rows pending remapping or
  # failed (Ampere and newer); pages pending retirement (before Ampere) are asked above.
  # cli/facts/sections/gpuhealth.py reads them.
  begin remapped-rows
  smi --query-remapped-rows=gpu_uuid,remapped_rows.pending,remapped_rows.failure --format=csv,noheader,nounits
  end remapped-rows $?
  begin compute-apps
  smi --query-compute-apps=gpu_uuid,pid,process_name,used_memory --format=csv,noheader,nounits
  end compute-apps $?
  begin topology
  smi topo -m
  end topology $?
else
  begin query-gpu
  printf 'nvidia-smi: command not found\n'
  end query-gpu 127
fi

# One line per file: PATH<TAB>CONTENT, PATH relative to /sys/class/infiniband.
begin infiniband
if [ -d /sys/class/infiniband ]; then
  for port in /sys/class/infiniband/*/ports/*; do
    [ -d "$port" ] || continue
    for name in state rate link_layer; do
      if [ -r "$port/$name" ]; then
        read -r value < "$port/$name" || value=
        printf '%s\t%s\n' "${port#/sys/class/infiniband/}/$name" "$value"
      fi
    done
  done
  end infiniband 0
else
  end infiniband 127
fi

# Listening TCP sockets (state 0A), so a new shard never gets a port something else holds.
# Only those rows: a router with ten thousand connections open has a 1.5 MB table.
# awk reads the tables itself (a cat was one more exec); /proc/net/tcp6 is absent where
# IPv6 is off, and a table that cannot be read ends the section with awk's error status.
begin listening
if [ -r /proc/net/tcp6 ]; then
  awk '$4 == "0A"' /proc/net/tcp /proc/net/tcp6 </dev/null
else
  awk '$4 == "0A"' /proc/net/tcp </dev/null
fi
end listening $?

# The model store (docs/facts.md): its path, whether it exists (if not, the nearest
# existing parent is measured: that is where the staging step will write), the weights
# stored there complete (one line a marker, bounded like a shard record), and last its
# filesystem's size and free space from statfs, whose exit status ends the section.
begin model-store
measured=$MODEL_STORE
if [ -d "$MODEL_STORE" ]; then
  printf 'store\t%s\tpresent\n' "$MODEL_STORE"
  for marker in "$MODEL_STORE"/*/.modelfleet-complete; do
    [ -f "$marker" ] || continue
    directory=${marker%/.modelfleet-complete}
    printf 'complete\t%s\t' "${directory##*/}"
    head -c 4096 "$marker" | tr -d '\n\t'
    printf '\n'
  done
else
  # dirname(1) by the shell: its parent, "/" above a top-level path, "." above a bare name.
  while [ ! -d "$measured" ]; do
    case $measured in
      */*) measured=${measured%/*}; measured=${measured:-/} ;;
      *) measured=. ;;
    esac
  done
  printf 'store\t%s\tabsent\t%s\n' "$MODEL_STORE" "$measured"
fi
stat -f --printf='filesystem\t%S\t%b\t%a\n' "$measured" 2>&1
end model-store $?

# The node's TLS files (cli/pki/node.py, docs/facts.md): whether node.key exists, never
# what it holds; node.pem and ca.pem as text, each cut at 64 KiB and one byte, so ctl can
# tell a file too large to be a certificate. MODELFLEET_PKI_DIR moves the directory.
begin pki
PKI_DIR=${MODELFLEET_PKI_DIR:-/etc/modelfleet/pki}
if [ -e "$PKI_DIR/node.key" ]; then printf 'key\tpresent\n'; else printf 'key\tabsent\n'; fi
for file in node.pem ca.pem; do
  if [ -f "$PKI_DIR/$file" ]; then
    printf 'file\t%s\n' "$file"
    head -c 65537 "$PKI_DIR/$file"
    printf '\nend\t%s\n' "$file"
  fi
done
end pki 0

# A router's record of what it serves (docs/routing.md): the line deploy_router.yml wrote
# once the router served the routes it was given, the digest of the routes file it has
# now, and whether both its units run. Only ctl's comparison says whether it is current.
begin router
ROUTER_DIR=${MODELFLEET_ROUTER_DIR:-/etc/modelfleet/router}
if [ -r "$ROUTER_DIR/served" ]; then
  printf 'served\t'; head -c 256 "$ROUTER_DIR/served" | tr -d '\n\t'; printf '\n'
  printf 'config\t'; sha256sum < "$ROUTER_DIR/config.yaml" 2>/dev/null | cut -c1-64
  printf 'units\t'
  systemctl is-active modelfleet-router.service modelfleet-router-front.service 2>/dev/null \
    | tr '\n' ' '
  end router 0
else
  end router 127
fi

begin shards
# One line a shard: its record, a tab, and its unit's state (systemctl is-active), which
# says whether the process the record describes still runs. One systemctl call for all.
if [ -d "$SHARD_DIR" ]; then
  names=
  for record in "$SHARD_DIR"/*.json; do
    [ -r "$record" ] || continue
    name=${record##*/}
    names="$names ${name%.json}"
  done
  states=
  if [ -n "$names" ] && command -v systemctl >/dev/null 2>&1; then
    units=
    for name in $names; do units="$units modelfleet-$name.service"; done
    # shellcheck disable=SC2086 # names are [A-Za-z0-9._-]: split on purpose
    states=$(systemctl is-active $units 2>/dev/null)
  fi
  # shellcheck disable=SC2086
  set -- $states
  for name in $names; do
    record="$SHARD_DIR/$name.json"
    if [ -r "$record" ]; then
      # Bounded: a record is a few hundred bytes; a runaway file cannot flood the output
      # (cut short, it is refused as unreadable, never taken for "no shard").
      head -c 65536 "$record" | tr -d '\n'
      [ -n "$states" ] && printf '\t%s' "${1:-unknown}"
      printf '\n'
    fi
    [ $# -gt 0 ] && shift
  done
fi
end shards 0

# The load of each replica whose rank 0 runs here: its engine's /metrics, asked over
# loopback, or at the address its record says the engine listens on (the node's
# listen_address; an IP address, never a name to look up), by python3 (which Ansible
# needs on every node anyway; without it the section ends 127 and the load is unknown). HTTP/1.0 on a raw socket so that a slow or endless
# answer is cut by the clock and the size, never the probe's own timeout: 2 s and 256 KiB
# a replica, 6 s in all. Every body line is marked "|", and the characters Python's
# splitlines() breaks on are replaced, so that no engine's text can end this section.
begin metrics
# Only a node with shard records has an engine to ask: without one, python3's start alone
# was half of the probe's CPU on the node (40 of 75 ms measured on the test fleet).
set -- "$SHARD_DIR"/*.json
if [ ! -e "$1" ]; then
  end metrics 0
elif command -v python3 >/dev/null 2>&1; then
  python3 -I - "$SHARD_DIR" "${MODELFLEET_PKI_DIR:-/etc/modelfleet/pki}" <<'PYTHON'
import glob, json, os, re, socket, ssl, sys, time
shard_dir, pki_dir = sys.argv[1], sys.argv[2]
limit, each, deadline = 262144, 2.0, time.monotonic() + 6.0
plain = re.compile(r"[A-Za-z0-9._-]{1,128}")
breaks = {ord(c): "?" for c in "\r\x00\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"}
for path in sorted(glob.glob(os.path.join(shard_dir, "*.json")))[:1024]:
    try:
        with open(path, "rb") as handle:
            record = json.loads(handle.read(65536))
        replica, port = str(record["replica"]), record["port"]
        if record.get("rank") != 0 or type(port) is not int or not plain.fullmatch(replica):
            continue
        host = record.get("listen") or "127.0.0.1"
    except Exception:
        continue
    ends = min(deadline, time.monotonic() + each)
    try:
        if ends <= time.monotonic():
            raise TimeoutError("no time left")
        socket.inet_pton(socket.AF_INET6 if ":" in host else socket.AF_INET, host)
        sock = socket.create_connection((host, port), timeout=ends - time.monotonic())
        if record.get("certificate"):
            context = ssl.create_default_context(cafile=os.path.join(pki_dir, "ca.pem"))
            context.check_hostname = False
            sock = context.wrap_socket(sock)
        sock.sendall(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        data = b""
        while len(data) <= limit + 16384:
            left = ends - time.monotonic()
            if left <= 0:
                raise TimeoutError("too slow")
            sock.settimeout(left)
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
        sock.close()
    except Exception as error:
        print("replica\t%s\terror\t%s" % (replica, type(error).__name__))
        continue
    head, _, body = data.partition(b"\r\n\r\n")
    status = head.split(b"\r\n", 1)[0].split(b" ")
    if len(body) > limit:
        print("replica\t%s\ttoo-large" % replica)
        continue
    if len(status) < 2 or not status[1].isdigit() or len(status[1]) != 3:
        print("replica\t%s\terror\tnot HTTP" % replica)
        continue
    print("replica\t%s\t%s" % (replica, status[1].decode()))
    for line in body.decode("utf-8", "replace").split("\n"):
        print("|" + line.translate(breaks))
PYTHON
  end metrics $?
else
  end metrics 127
fi
