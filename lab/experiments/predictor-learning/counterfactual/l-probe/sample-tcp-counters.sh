#!/bin/bash
# Usage: sample-tcp-counters.sh OUT (root; stop it with kill). Appends every 2 s, per producer namespace
# (kaudit-*-p): epoch s, namespace, OutSegs, RetransSegs (/proc/net/snmp), TCPOrigDataSent, TCPTimeouts
# (/proc/net/netstat).
out=$1
while true; do
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -- '-p$'); do
    s=$(ip netns exec $ns cat /proc/net/snmp 2>/dev/null | awk '/^Tcp:/{if(!h){for(i=1;i<=NF;i++)n[$i]=i;h=1}else{print $n["OutSegs"], $n["RetransSegs"]}}')
    x=$(ip netns exec $ns cat /proc/net/netstat 2>/dev/null | awk '/^TcpExt:/{if(!h){for(i=1;i<=NF;i++)n[$i]=i;h=1}else{print $n["TCPOrigDataSent"], $n["TCPTimeouts"]}}')
    echo "$(date +%s.%N) $ns $s $x" >> $out
  done
  sleep 2
done
