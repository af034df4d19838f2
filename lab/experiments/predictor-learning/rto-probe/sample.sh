#!/usr/bin/env bash
# sample /proc/net/snmp + /proc/net/netstat of every kafka-audit producer namespace each second
out=$1
while true; do
  for ns in $(ip netns list | awk '{print $1}'); do
    ts=$(date +%s%3N)
    ip netns exec "$ns" sh -c 'grep "^Tcp:" /proc/net/snmp | tail -1; grep "^TcpExt:" /proc/net/netstat | tail -1' 2>/dev/null | tr '\n' ' ' | sed "s/^/$ts $ns /" >> "$out"
    echo >> "$out"
  done
  sleep 1
done
