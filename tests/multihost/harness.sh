#!/usr/bin/env bash
# Multi-host test harness: N "hosts" on this machine, each one a network namespace plus a PID
# namespace (with its own /proc) running its own sshd on its own address, reached from the root
# namespace over a private bridge. Ansible talks to them with the real ssh connection plugin
# and key authentication. Each host has its own /dev/shm (a tmpfs in its mount namespace); the
# rest of the filesystem is shared (every host gets its own state/log dirs in the inventory).
#
#   harness.sh up [--hosts N] [--dir DIR]   create; prints DIR (holds env, inventory.yml, keys)
#   harness.sh down DIR                     remove everything `up` created (idempotent)
#   harness.sh exec DIR HOST CMD...         run CMD inside HOST's net+pid+mount namespaces
#   harness.sh status DIR                   show hosts, sshd pids, addresses
#
# Everything it creates is named llmops-mh-<tag>...: netns llmops-mh-<tag>-hN, bridge
# llmops-mh-<tag>, veths llmops-mh-<tag>N (root side; the netns side is eth0 inside the netns),
# directory /tmp/llmops-mh-<tag>, sshd -f /tmp/llmops-mh-<tag>/hN/sshd_config.
# Needs root, iproute2, util-linux (unshare, nsenter, flock) and openssh-server (installed
# with apt-get when /usr/sbin/sshd is missing).
set -euo pipefail

PREFIX=llmops-mh
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
SSHD=${LLMOPS_MH_SSHD:-/usr/sbin/sshd}
NET_BASE=${LLMOPS_MH_NET_BASE:-10.213}      # hosts get ${NET_BASE}.<X>.1N/24, X picked free
LOCK=/run/lock/${PREFIX}.lock

die() { echo "harness: $*" >&2; exit 1; }
log() { echo "harness: $*" >&2; }

need_root() { [ "$(id -u)" = 0 ] || die "must run as root (network namespaces, sshd)"; }

ensure_sshd() {
    [ -x "$SSHD" ] && return 0
    command -v apt-get >/dev/null || die "$SSHD missing and no apt-get: install openssh-server"
    log "installing openssh-server (apt-get)"
    # Debian's postinst would start the host's own ssh service; policy-rc.d / no systemd in
    # containers prevents that. RUNLEVEL=1 makes invoke-rc.d skip starting it elsewhere too.
    if ! RUNLEVEL=1 DEBIAN_FRONTEND=noninteractive apt-get install -y -q openssh-server >/dev/null; then
        apt-get update -q >/dev/null
        RUNLEVEL=1 DEBIAN_FRONTEND=noninteractive apt-get install -y -q openssh-server >/dev/null
    fi
    [ -x "$SSHD" ] || die "openssh-server installed but $SSHD is missing"
}

# Pick a /24 under NET_BASE that the root namespace has neither as an address nor as a route.
pick_subnet() {
    local used x
    used=$( { ip -4 -o addr show; ip -4 route show table all; } 2>/dev/null )
    for x in $(seq 71 250); do
        if ! grep -q "${NET_BASE//./\\.}\.${x}\." <<<"$used"; then
            echo "$x"; return 0
        fi
    done
    die "no free ${NET_BASE}.X.0/24 subnet"
}

# ------------------------------------------------------------------------------------------
cmd_up() {
    local n=3 dir="" tag x i ns host addr br veth cfg pid
    while [ $# -gt 0 ]; do
        case "$1" in
            --hosts) n=$2; shift 2;;
            --dir) dir=$2; shift 2;;
            *) die "up: unknown argument $1";;
        esac
    done
    [[ "$n" =~ ^[1-9]$ ]] || die "--hosts must be 1..9"
    need_root
    for t in ip unshare nsenter flock ssh ssh-keygen setsid; do
        command -v "$t" >/dev/null || die "$t not found"
    done
    ensure_sshd
    # The tag names every kernel object; 4 lowercase chars keep interface names <= 15 chars.
    tag=$(head -c 16 /dev/urandom | md5sum | cut -c1-4)
    while ip link show "${PREFIX}-${tag}" >/dev/null 2>&1 || [ -e "/tmp/${PREFIX}-${tag}" ] \
            || ip netns list | grep -q "^${PREFIX}-${tag}-"; do
        tag=$(head -c 16 /dev/urandom | md5sum | cut -c1-4)
    done
    [ -n "$dir" ] || dir="/tmp/${PREFIX}-${tag}"
    case "$(basename "$dir")" in ${PREFIX}-*) ;; *) die "--dir must be named ${PREFIX}-*";; esac
    [ ! -e "$dir" ] || [ -z "$(ls -A "$dir")" ] || die "$dir exists and is not empty"
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd)
    echo "$tag" >"$dir/tag"
    echo "$n" >"$dir/nhosts"
    # From here on a failure removes what was made so far.
    # shellcheck disable=SC2154  # rc is assigned inside the trap string itself
    trap 'rc=$?; if [ $rc -ne 0 ]; then log "up failed, cleaning up"; cmd_down "'"$dir"'" || true; fi' EXIT

    br="${PREFIX}-${tag}"
    exec 9>"$LOCK"
    flock -w 60 9 || die "could not take $LOCK"
    x=$(pick_subnet)
    echo "$x" >"$dir/subnet"
    local net="${NET_BASE}.${x}"
    log "tag=$tag subnet=${net}.0/24 hosts=$n dir=$dir"

    ip link add "$br" type bridge
    echo "$br" >>"$dir/links"
    ip addr add "${net}.1/24" dev "$br"
    ip link set "$br" up
    flock -u 9

    # One key pair for the controller -> every host.
    ssh-keygen -q -t ed25519 -N '' -C "${PREFIX}-${tag}" -f "$dir/id_ed25519"
    mkdir -p /run/sshd && chmod 0755 /run/sshd   # sshd's compiled-in privilege separation dir
    mkdir -p "$dir/cp"

    for i in $(seq 1 "$n"); do
        host="h$i"; ns="${PREFIX}-${tag}-${host}"; veth="${PREFIX}-${tag}${i}"; addr="${net}.1${i}"
        mkdir -p "$dir/$host"/{state,log,dump,tmp}
        # /etc/netns/<ns>/* is bind-mounted over /etc/* by `ip netns exec`: the host gets its
        # own hosts file (every harness host by name) and a resolver that fails at once instead
        # of timing out on an unreachable nameserver (reverse lookups on bind would take 10 s).
        [ -d /etc/netns ] || { mkdir /etc/netns; touch "$dir/created-etc-netns"; }
        mkdir -p "/etc/netns/$ns"
        echo "$ns" >>"$dir/netns"
        : >"/etc/netns/$ns/resolv.conf"
        {
            echo "127.0.0.1 localhost"
            local j; for j in $(seq 1 "$n"); do echo "${net}.1${j} mh${j} ${PREFIX}-${tag}-h${j}"; done
        } >"/etc/netns/$ns/hosts"
        ip netns add "$ns"
        ip link add "$veth" type veth peer name eth0 netns "$ns"
        echo "$veth" >>"$dir/links"
        ip link set "$veth" master "$br" up
        ip -n "$ns" link set lo up
        ip -n "$ns" addr add "${addr}/24" dev eth0
        ip -n "$ns" link set eth0 up
        ip -n "$ns" route add default via "${net}.1"
        ssh-keygen -q -t ed25519 -N '' -C "${ns}" -f "$dir/$host/ssh_host_ed25519_key"
        cfg="$dir/$host/sshd_config"
        cat >"$cfg" <<EOF
# ${PREFIX} harness sshd for ${ns}
ListenAddress ${addr}:22
HostKey $dir/$host/ssh_host_ed25519_key
PidFile $dir/$host/sshd.pid
AuthorizedKeysFile $dir/id_ed25519.pub
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
MaxStartups 100:30:200
MaxSessions 50
LogLevel VERBOSE
AcceptEnv LANG LC_*
Subsystem sftp /usr/lib/openssh/sftp-server
EOF
        "$SSHD" -t -f "$cfg" || die "sshd -t rejected $cfg"
        # netns exec -> unshare (stays in the root pid ns) -> sshd as PID 1 of a new pid ns with
        # its own /proc. Killing that PID 1 kills everything the host ever started.
        # The new mount namespace (private propagation) also gets its own /dev/shm, as a
        # real host has: a teardown's shm sweep on one host must not see another's files.
        # shellcheck disable=SC2016  # $0/$@/the size expand in the inner sh, on purpose
        setsid ip netns exec "$ns" unshare --pid --fork --mount-proc --kill-child \
            /bin/sh -c 'mount -t tmpfs -o mode=1777,size=${LLMOPS_MH_SHM_SIZE:-256m} '"${ns}-shm"' /dev/shm && exec "$0" "$@"' \
            "$SSHD" -D -e -f "$cfg" </dev/null >>"$dir/$host/sshd.log" 2>&1 &
        echo $! >"$dir/$host/unshare.pid"
        printf '%s %s %s\n' "$host" "$addr" "$ns" >>"$dir/hosts"
    done

    # Wait for every sshd (PID 1 of its namespace) and record its pid in the root namespace.
    for i in $(seq 1 "$n"); do
        host="h$i"; addr="${net}.1${i}"
        local upid; upid=$(cat "$dir/$host/unshare.pid")
        for _ in $(seq 1 100); do
            pid=$(cat "/proc/$upid/task/$upid/children" 2>/dev/null | awk '{print $1}') || true
            [ -n "$pid" ] && (exec 3<>"/dev/tcp/$addr/22") 2>/dev/null && break
            kill -0 "$upid" 2>/dev/null || { cat "$dir/$host/sshd.log" >&2; die "sshd for $host exited"; }
            sleep 0.1
        done
        [ -n "$pid" ] || die "sshd for $host did not start"
        (exec 3<>"/dev/tcp/$addr/22") 2>/dev/null || die "sshd for $host does not listen on $addr:22"
        echo "$pid" >"$dir/$host/init.pid"
    done

    write_inventory "$dir" "$n" "$net"
    cat >"$dir/env" <<EOF
export LLMOPS_MH_DIR=$dir
export LLMOPS_MH_TAG=$tag
export LLMOPS_MH_NHOSTS=$n
export LLMOPS_MH_NET=$net
export LLMOPS_MH_INVENTORY=$dir/inventory.yml
export ANSIBLE_SSH_CONTROL_PATH_DIR=$dir/cp
EOF

    # Self-check: ssh with the key into each host (proves key auth, namespaces), and the
    # hosts reach each other (multi-node rendezvous needs host -> host traffic on the bridge).
    for i in $(seq 1 "$n"); do
        addr="${net}.1${i}"
        local inside
        inside=$(ssh -i "$dir/id_ed25519" -o BatchMode=yes -o StrictHostKeyChecking=no \
            -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR -o ConnectTimeout=5 \
            "root@$addr" 'echo "$(ip -4 -o addr show dev eth0 | awk "{print \$4}") $$"') \
            || die "ssh root@$addr failed (see $dir/h$i/sshd.log)"
        log "h$i: ssh ok, inside: $inside"
        if [ "$i" -gt 1 ]; then
            cmd_exec "$dir" "h$i" bash -c "exec 3<>/dev/tcp/${net}.11/22" \
                || die "h$i cannot reach h1 over the bridge (firewall on bridged traffic? br_netfilter + FORWARD DROP)"
        fi
    done
    trap - EXIT
    echo "$dir"
}

write_inventory() {
    local dir=$1 n=$2 net=$3 i host
    local py="${LLMOPS_MH_PYTHON:-$ROOT/.venv/bin/python}"
    local venv="${LLMOPS_MH_SGLANG_VENV:-$ROOT/.venv-emulator}"
    {
        echo "# generated by tests/multihost/harness.sh for $dir - removed by 'harness.sh down'"
        echo "all:"
        echo "  vars:"
        echo "    ansible_connection: ssh"
        echo "    ansible_user: root"
        echo "    ansible_ssh_private_key_file: $dir/id_ed25519"
        echo "    ansible_ssh_common_args: >-"
        echo "      -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null"
        echo "      -o IdentitiesOnly=yes -o BatchMode=yes -o LogLevel=ERROR"
        echo "    ansible_python_interpreter: $py"
        echo "    llmops_mh_dir: $dir"
        echo "    llmops_mh_venv: $venv"
        echo "    llmops_mh_root: $ROOT"
        sed 's/^/    /' "$HERE/inventory_vars.yml"
        echo "  children:"
        echo "    sglang_mh:"
        echo "      hosts:"
        for i in $(seq 1 "$n"); do
            host="h$i"
            echo "        mh$i:"
            echo "          ansible_host: ${net}.1${i}"
            echo "          llmops_mh_host: $host"
            echo "          llmops_mh_netns: ${PREFIX}-$(cat "$dir/tag")-${host}"
            echo "          llmops_mh_state_dir: $dir/$host/state"
            echo "          llmops_mh_log_dir: $dir/$host/log"
            echo "          llmops_mh_dump_dir: /dev/shm/${PREFIX}-hs"
            echo "          llmops_mh_tmp_dir: $dir/$host/tmp"
            echo "          llmops_mh_port: $((31000 + i))"
            echo "          llmops_mh_mn_port: $((33000 + i))"
        done
        # The collection's playbooks target gpu_8x by default; restart_multinode.yml targets
        # sglang_multinode (inventory order = node rank).
        echo "    gpu_8x:"
        echo "      children:"
        echo "        sglang_mh:"
        echo "    sglang_multinode:"
        echo "      hosts:"
        for i in $(seq 1 "$n"); do echo "        mh$i:"; done
    } >"$dir/inventory.yml"
}

# ------------------------------------------------------------------------------------------
host_init_pid() {  # DIR HOST -> pid of the host's PID 1 (its sshd) as the root ns sees it
    local f="$1/$2/init.pid"
    [ -s "$f" ] || die "no such host $2 in $1"
    cat "$f"
}

cmd_exec() {
    local dir=$1 host=$2; shift 2
    local pid; pid=$(host_init_pid "$dir" "$host")
    # -n net, -p pid, -m mount (its /proc shows only that host's processes)
    nsenter -t "$pid" -n -p -m -- "$@"
}

cmd_status() {
    local dir=$1 host addr ns
    while read -r host addr ns; do
        printf '%s %s %s init=%s\n' "$host" "$addr" "$ns" "$(cat "$dir/$host/init.pid" 2>/dev/null || echo -)"
    done <"$dir/hosts"
}

# Remove only what this harness instance recorded (plus anything carrying its tag).
cmd_down() {
    local dir=$1 tag f pid upid ns link
    [ -d "$dir" ] || { log "down: $dir does not exist"; return 0; }
    case "$(basename "$dir")" in ${PREFIX}-*) ;; *) die "down: refusing $dir (not a ${PREFIX}- dir)";; esac
    tag=$(cat "$dir/tag" 2>/dev/null || true)
    # 1. PID 1 of each host namespace: SIGKILL takes every process of that namespace with it.
    for f in "$dir"/h*/init.pid; do
        [ -s "$f" ] || continue
        pid=$(cat "$f")
        if [ -r "/proc/$pid/cmdline" ] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q -- "-f $dir/"; then
            kill -KILL "$pid" 2>/dev/null || true
        fi
    done
    for f in "$dir"/h*/unshare.pid; do
        [ -s "$f" ] || continue
        upid=$(cat "$f")
        if [ -r "/proc/$upid/cmdline" ] && tr '\0' ' ' <"/proc/$upid/cmdline" | grep -q -- "-f $dir/"; then
            # unshare --kill-child: killing it also kills the namespace's PID 1 if still there
            kill -TERM "$upid" 2>/dev/null || true
        fi
    done
    for f in "$dir"/h*/unshare.pid; do
        [ -s "$f" ] || continue
        upid=$(cat "$f")
        for _ in $(seq 1 50); do kill -0 "$upid" 2>/dev/null || break; sleep 0.1; done
    done
    # 2. namespaces, then links (veths vanish with their netns; the bridge is ours).
    if [ -s "$dir/netns" ]; then
        while read -r ns; do
            case "$ns" in
                ${PREFIX}-*)
                    ip netns del "$ns" 2>/dev/null || true
                    rm -rf "/etc/netns/$ns"
                    ;;
            esac
        done <"$dir/netns"
    fi
    if [ -s "$dir/links" ]; then
        while read -r link; do
            case "$link" in ${PREFIX}-*) ip link del "$link" 2>/dev/null || true;; esac
        done <"$dir/links"
    fi
    [ ! -e "$dir/created-etc-netns" ] || rmdir /etc/netns 2>/dev/null || true  # ours, and empty
    rm -rf "$dir"
    log "down: removed $dir${tag:+ (tag $tag)}"
}

# ------------------------------------------------------------------------------------------
main() {
    local cmd=${1:-}; shift || true
    case "$cmd" in
        up) cmd_up "$@";;
        down) [ $# -eq 1 ] || die "usage: down DIR"; need_root; cmd_down "$1";;
        exec) [ $# -ge 3 ] || die "usage: exec DIR HOST CMD..."; cmd_exec "$@";;
        status) [ $# -eq 1 ] || die "usage: status DIR"; cmd_status "$1";;
        *) sed -n '2,17p' "$0" >&2; exit 2;;
    esac
}
main "$@"
