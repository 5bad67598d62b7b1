#!/bin/sh
# Re-records the testdata in this directory from real tool runs on loopback.
# Usage: sh record.sh   (run from this directory; needs iperf3, netperf, netserver)
# Servers are started on fixed high ports and stopped by PID.
set -u
cd "$(dirname "$0")"
IP=127.0.0.1 IPORT=45201 NPORT=42865 DPORT=42900 DEAD=42999 TPORT=45202

# The iperf3 server as driver.ServerCommand runs it (-J -i 0.1: its intervals reach a TCP
# client's --get-server-output as JSON); on TPORT one without -J (its intervals come as text:
# the parser's fallback to end.sum_*).
iperf3 -s -J -i 0.1 -p $IPORT >/dev/null 2>&1 & IPID=$!
iperf3 -s -p $TPORT >/dev/null 2>&1 & TPID=$!
netserver -D -p $NPORT >/dev/null 2>&1 & NPID=$!
trap 'kill $IPID $TPID $NPID 2>/dev/null' EXIT
sleep 1

SEL=THROUGHPUT,THROUGHPUT_UNITS,TRANSACTION_RATE,MIN_LATENCY,MEAN_LATENCY,P50_LATENCY,P90_LATENCY,P99_LATENCY,MAX_LATENCY,LOCAL_CPU_UTIL,REMOTE_CPU_UTIL
run() { # file, argv...
	f=$1; shift
	"$@" >"$f" 2>&1
	echo "$f (exit $?): $*" >>README.txt
}

{
	echo "(The curl-*.txt recordings are described in README-curl.txt: record.sh rewrites this file.)"
	echo "Real tool outputs recorded by record.sh on loopback ($IP), stdout+stderr combined."
	echo "date:    $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "kernel:  $(uname -srm)"
	echo "iperf3:  $(iperf3 --version | head -n1)"
	echo "netperf: $(netperf -V | head -n1)"
	echo "servers: iperf3 -s -J -i 0.1 -p $IPORT ; iperf3 -s -p $TPORT ; netserver -D -p $NPORT"
	echo "Notes: iperf3 3.12 exits 0 even when -J reports an \"error\"."
	echo "  iperf3 UDP: end.sum_received is the receiver side; end.sum mixes the sender's"
	echo "  bytes/rate with the receiver's loss/jitter. netperf TCP_CRR runs ~4 s (PAD_TIME)"
	echo "  longer than -l; short CRR runs on loopback (with many TIME_WAIT sockets) sometimes"
	echo "  report LOCAL_CPU_UTIL=100 and REMOTE_CPU_UTIL of up to ~500 (bogus)."
	echo
} >README.txt

run iperf3_tcp.json iperf3 -c $IP -p $IPORT -t 2 -J -i 0.1 --get-server-output -N -Z -M 1448
run iperf3_tcp_textserver.json iperf3 -c $IP -p $TPORT -t 2 -J -i 0.1 --get-server-output -N -Z -M 1448
run iperf3_udp.json iperf3 -c $IP -p $IPORT -t 2 -J -u -b 0 -l 1448
run iperf3_refused.json iperf3 -c $IP -p $DEAD -t 2 -J -N -Z -M 1448
run netperf_tcp_rr.txt netperf -H $IP -p $NPORT -t TCP_RR -l 2 -j -c -C -- -k $SEL
run netperf_tcp_crr.txt netperf -H $IP -p $NPORT -t TCP_CRR -l 2 -j -c -C -- -P ,$DPORT -k $SEL
run netperf_udp_rr.txt netperf -H $IP -p $NPORT -t UDP_RR -l 2 -j -c -C -- -k $SEL
run netperf_noserver.txt netperf -H $IP -p $DEAD -t TCP_RR -l 2 -j -c -C -- -k $SEL
