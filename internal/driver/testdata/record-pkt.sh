#!/bin/sh
# Re-records the pkt_*.json / pkt_*.txt testdata: the outputs of 'cnibench pkt recv' and
# 'cnibench pkt gen' run in two network namespaces (names with the test prefix cnbt) joined by
# a veth pair; everything is removed on exit.
# Usage: sh record-pkt.sh /path/to/cnibench   (as root; needs iproute2 and nsenter)
set -u
BIN=$(realpath "$1")
cd "$(dirname "$0")"
P=cnbt$(od -An -N3 -tx1 /dev/urandom | tr -d ' \n')
G=$P-g R=$P-r RPID=
cleanup() {
	[ -n "$RPID" ] && kill "$RPID" 2>/dev/null
	ip netns del "$G" 2>/dev/null
	ip netns del "$R" 2>/dev/null
}
trap cleanup EXIT
ip netns add "$G" && ip netns add "$R" || exit 1
ip -n "$G" link add gen0 type veth peer name recv0 netns "$R"
ip -n "$G" addr add 10.252.0.1/24 dev gen0
ip -n "$R" addr add 10.252.0.2/24 dev recv0
ip -n "$G" link set gen0 up
ip -n "$R" link set recv0 up

{
	echo "Real outputs of cnibench pkt recv / pkt gen, recorded by record-pkt.sh (stdout+stderr combined)"
	echo "in two namespaces joined by a veth pair: gen0 10.252.0.1/24 -- recv0 10.252.0.2/24."
	echo "date:    $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "kernel:  $(uname -srm)"
	echo "binary:  $("$BIN" version)"
	echo "The receiver starts first (nsenter --net=/run/netns/<receiver> cnibench pkt recv) and is"
	echo "stopped with SIGTERM 0.3 s after the generator has ended."
	echo
} >README-pkt.txt

# trial NAME ARGS...: a receiver, then a generator with ARGS, then SIGTERM to the receiver.
trial() {
	name=$1
	shift
	nsenter --net=/run/netns/"$R" "$BIN" pkt recv >pkt_recv_"$name".json 2>&1 &
	RPID=$!
	sleep 0.5
	nsenter --net=/run/netns/"$G" "$BIN" pkt gen "$@" >pkt_gen_"$name".json 2>&1
	echo "pkt_gen_$name.json (exit $?): cnibench pkt gen $*" >>README-pkt.txt
	sleep 0.3
	kill -TERM "$RPID"
	wait "$RPID"
	echo "pkt_recv_$name.json (exit $?): cnibench pkt recv (SIGTERM)" >>README-pkt.txt
	RPID=
}

trial gtpu --dst 10.252.0.2 --rate 20000 --duration 2s --size 256 --streams 3 --teid 1000 --rotate 500ms --probe-rate 5
trial udp_imix --dst 10.252.0.2 --rate 0 --duration 1s --mode udp --size imix --cpu 0

nsenter --net=/run/netns/"$G" "$BIN" pkt gen --dst 10.252.0.99 --duration 1s >pkt_gen_noarp.txt 2>&1
echo "pkt_gen_noarp.txt (exit $?): cnibench pkt gen --dst 10.252.0.99 --duration 1s   (nobody has that address)" >>README-pkt.txt
nsenter --net=/run/netns/"$R" "$BIN" pkt recv --duration 1s >pkt_recv_idle.json 2>&1
echo "pkt_recv_idle.json (exit $?): cnibench pkt recv --duration 1s   (no generator)" >>README-pkt.txt
