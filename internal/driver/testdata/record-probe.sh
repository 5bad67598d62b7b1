#!/bin/sh
# Re-records the probe-*.txt testdata: the outputs of 'cnibench probe' (stdout+stderr) run in a
# client network namespace against a server namespace joined by a veth pair, both named with
# the test prefix cnbtp<digits>; everything is removed on exit, however it exits. Nothing is
# configured in the root namespace.
# Usage: sh record-probe.sh /path/to/cnibench   (as root; needs iproute2, nsenter, taskset, nft
# and busybox)
set -u
BIN=$(realpath "$1")
cd "$(dirname "$0")"
P=cnbtp$(od -An -N4 -tu4 /dev/urandom | tr -d ' \n')
C=$P-c S=$P-s LPID= PPID_=
cleanup() {
	[ -n "$PPID_" ] && kill "$PPID_" 2>/dev/null
	[ -n "$LPID" ] && kill "$LPID" 2>/dev/null
	# busybox nc -ll forks a child per connection: end those still in the namespace too.
	for pid in $(ip netns pids "$S" 2>/dev/null); do kill "$pid" 2>/dev/null; done
	ip netns del "$C" 2>/dev/null
	ip netns del "$S" 2>/dev/null
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP
ip netns add "$C" && ip netns add "$S" || exit 1
ip -n "$C" link add cli0 type veth peer name srv0 netns "$S" || exit 1
ip -n "$C" addr add 10.253.0.1/24 dev cli0
ip -n "$S" addr add 10.253.0.2/24 dev srv0
ip -n "$C" link set cli0 up
ip -n "$S" link set srv0 up
ip -n "$C" link set lo up
ip -n "$S" link set lo up
# 8082: SYNs dropped (timeout); 8083: rejected with ICMP admin-prohibited, as a policy's
# REJECT does (unreachable).
nsenter --net=/run/netns/"$S" nft -f - <<'EOF' || exit 1
table inet cnbtp {
	chain input {
		type filter hook input priority 0; policy accept;
		tcp dport 8082 drop
		tcp dport 8083 reject with icmp type admin-prohibited
	}
}
EOF

# listen PORT: an endpoint answering every connection with its address, as the scenario's do.
listen() {
	nsenter --net=/run/netns/"$S" busybox nc -ll -p "$1" -e echo 10.253.0.2 &
	LPID=$!
	sleep 0.3
}
unlisten() {
	kill "$LPID"
	wait "$LPID" 2>/dev/null
	LPID=
}
# probe FILE ARGS...: the prober in the client namespace, pinned to CPU 0 as trials pin it.
probe() {
	f=$1
	shift
	nsenter --net=/run/netns/"$C" taskset -c 0 "$BIN" probe "$@" >"$f" 2>&1
	echo "$f (exit $?): cnibench probe $*" >>README-probe.txt
}

{
	echo "Real outputs of cnibench probe, recorded by record-probe.sh (stdout+stderr combined) in a"
	echo "client namespace (cli0 10.253.0.1/24) joined by a veth pair to a server namespace (srv0"
	echo "10.253.0.2/24), the prober pinned to CPU 0 (nsenter --net=/run/netns/<client> taskset -c 0)."
	echo "Listeners: busybox nc -ll -p PORT -e echo 10.253.0.2 in the server namespace (answers every"
	echo "connection with that line and closes it). The server namespace's nft table drops SYNs to"
	echo "port 8082 and rejects those to 8083 with ICMP admin-prohibited; nothing listens on 8081."
	echo "date:    $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "kernel:  $(uname -srm)"
	echo "binary:  $("$BIN" version)"
	echo "Notes: probe-unreachable.txt has 6 unreachable attempts, then timeouts: the rejecting"
	echo "  namespace rate-limits its ICMP errors per destination (net.ipv4.icmp_ratelimit=1000 ms,"
	echo "  a burst of 6), so a REJECT by ICMP (a policy's, or kube-proxy's icmp-port-unreachable for a"
	echo "  Service without endpoints) looks like a DROP after the first few attempts of a fast probe."
	echo "  probe-transition.txt ends by SIGTERM, the way the scenario stops the prober."
	echo
} >README-probe.txt

listen 8080
probe probe-ok.txt --target 10.253.0.2:8080 --interval 2ms --duration 400ms
unlisten
probe probe-refused.txt --target 10.253.0.2:8081 --interval 1ms --duration 200ms
probe probe-timeout.txt --target 10.253.0.2:8082 --interval 5ms --timeout 50ms --duration 200ms
probe probe-unreachable.txt --target 10.253.0.2:8083 --interval 5ms --duration 100ms

# The transition: refused, then a listener comes up (0.2 s in), then goes away (0.3 s later);
# the prober ends by SIGTERM 0.2 s after that.
nsenter --net=/run/netns/"$C" taskset -c 0 "$BIN" probe --target 10.253.0.2:8084 --interval 2ms >probe-transition.txt 2>&1 &
PPID_=$!
sleep 0.2
nsenter --net=/run/netns/"$S" busybox nc -ll -p 8084 -e echo 10.253.0.2 &
LPID=$!
sleep 0.3
unlisten
sleep 0.2
kill -TERM "$PPID_"
wait "$PPID_"
echo "probe-transition.txt (exit $?): cnibench probe --target 10.253.0.2:8084 --interval 2ms   (nothing listens; 0.2 s in, busybox nc -ll -p 8084 starts; 0.3 s later it is killed; 0.2 s later the prober gets SIGTERM)" >>README-probe.txt
PPID_=
