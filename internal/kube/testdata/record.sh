#!/bin/sh
# Re-records the /proc texts in this directory from this machine.
# Usage: sh record.sh   (run from this directory; needs python3 and busybox)
# A helper opens a TCP listener on 127.0.0.1:45280, an IPv6 one on [::1]:45281 (when the
# kernel has IPv6) and one established connection to the first, then copies /proc/net/tcp and
# /proc/net/tcp6 while they exist; expect.txt names the ports the parser must (not) report.
# A zombie is made the way a server dies in a kube pod (parent exec'd into a non-reaping
# sleep) and its /proc/PID/stat recorded along with a running process's.
set -eu
cd "$(dirname "$0")"
python3 - <<'PY'
import socket
l4 = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
l4.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l4.bind(("127.0.0.1", 45280)); l4.listen(1)
expect = ["listen 45280"]
try:
    l6 = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    l6.bind(("::1", 45281)); l6.listen(1)
    expect.append("listen 45281")
except OSError:
    pass
c = socket.create_connection(("127.0.0.1", 45280))
s, _ = l4.accept()
expect.append("established %d" % c.getsockname()[1])
for f in ("tcp", "tcp6"):
    with open("/proc/net/" + f) as src, open("proc_net_" + f + ".txt", "w") as dst:
        dst.write(src.read())
with open("expect.txt", "w") as e:
    e.write("\n".join(expect) + "\n")
PY
head -1 /proc/stat >proc_stat.txt
busybox sleep 5 & RUN=$!
sh -c 'busybox sleep 0 & echo $! >zpid; exec busybox sleep 3' & PARENT=$!
sleep 1
cat /proc/$RUN/stat >proc_pid_stat_running.txt
cat /proc/"$(cat zpid)"/stat >proc_pid_stat_zombie.txt
rm -f zpid
kill $RUN $PARENT 2>/dev/null || true
{
	echo "Recorded by record.sh"
	echo "date:   $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "kernel: $(uname -srm)"
} >README.txt
