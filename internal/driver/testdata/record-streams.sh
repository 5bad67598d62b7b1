#!/bin/sh
# Re-records the multi-stream testdata (README-streams.txt) from real tool runs on loopback:
# iperf3 with parallel streams and message sizes, and netperf instances run at the same time
# against one netserver, each on its own data port, as a trial of several rr streams runs them.
# Usage: sh record-streams.sh   (run from this directory; needs iperf3, netperf, netserver)
set -u
cd "$(dirname "$0")"
IP=127.0.0.1 IPORT=45211 NPORT=42875 DPORT=42910

iperf3 -s -J -i 0.1 -p $IPORT >/dev/null 2>&1 & IPID=$!
netserver -D -p $NPORT >/dev/null 2>&1 & NPID=$!
trap 'kill $IPID $NPID 2>/dev/null' EXIT
sleep 1

SEL=THROUGHPUT,THROUGHPUT_UNITS,TRANSACTION_RATE,MIN_LATENCY,MEAN_LATENCY,P50_LATENCY,P90_LATENCY,P99_LATENCY,MAX_LATENCY,LOCAL_CPU_UTIL,REMOTE_CPU_UTIL,REQUEST_SIZE
{
	echo "Real tool outputs recorded by record-streams.sh on loopback ($IP), stdout+stderr combined."
	echo "date:    $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "kernel:  $(uname -srm)"
	echo "iperf3:  $(iperf3 --version | head -n1)"
	echo "netperf: $(netperf -V | head -n1)"
	echo "servers: iperf3 -s -J -i 0.1 -p $IPORT ; netserver -D -p $NPORT"
	echo "netperf_*_x3_N.txt: three instances started together (background), N = 0, 1, 2."
	echo
} >README-streams.txt

run() { # file, argv...
	f=$1; shift
	"$@" >"$f" 2>&1
	echo "$f (exit $?): $*" >>README-streams.txt
}
run iperf3_tcp_p4_l8192.json iperf3 -c $IP -p $IPORT -t 2 -J -P 4 -i 0.1 --get-server-output -N -Z -M 1448 -l 8192
run iperf3_udp_p2_l512.json iperf3 -c $IP -p $IPORT -t 2 -J -P 2 -u -b 0 -l 512

together() { # name, test, sizes
	pids=
	for i in 0 1 2; do
		run "netperf_$1_x3_$i.txt" netperf -H $IP -p $NPORT -t "$2" -l 2 -j -c -C -- -P ,$((DPORT + i)) -r "$3" -k $SEL &
		pids="$pids $!"
	done
	wait $pids
}
together tcp_rr TCP_RR 64,64
together tcp_crr TCP_CRR 1,1
