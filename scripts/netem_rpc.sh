#!/usr/bin/env bash
# Two RPC workers behind a network delay (tc netem) inside a network namespace of their own, for
# `ggufspec bench --rpc ... --sweep-ngl ...`: what speculative decoding buys when every target step
# pays network round trips. Needs root and iproute2 (apt-get install -y iproute2).
#
#   sudo scripts/netem_rpc.sh up 2ms        # namespace ggufspec-rpc, workers 10.77.0.2:50052,50053,
#                                           # 2 ms each way on the link (RTT about 4 ms)
#   ggufspec bench --rpc 10.77.0.2:50052,10.77.0.2:50053 --sweep-ngl 0,8,16,24,all ...
#   sudo scripts/netem_rpc.sh delay 0.5ms   # change the delay with the workers running
#   sudo scripts/netem_rpc.sh down          # stop the workers, remove the namespace
#   sudo scripts/netem_rpc.sh up none       # no delay (a kernel without sch_netem): a smoke test
#
# The delay is set on both ends of the veth pair (DELAY each way). Workers bind 10.77.0.2 (a
# private link that only this machine reaches), so ggufspec prints its no-authentication warning.
set -euo pipefail

NS="${NS:-ggufspec-rpc}"
HOST_IF="${NS:0:10}-h" PEER_IF="${NS:0:10}-w"
HOST_IP=10.77.0.1 WORKER_IP=10.77.0.2
PORTS="${PORTS:-50052 50053}"
THREADS="${THREADS:-1}"
PY="${PYTHON:-python}"
RUN_DIR="${RUN_DIR:-/tmp/$NS}"

set_delay() {
  local d="$1"
  [[ "$d" == none ]] && return 0  # no delay: the namespace and workers only (a smoke test)
  if ! tc qdisc replace dev "$HOST_IF" root netem delay "$d" 2>/dev/null; then
    echo "error: this kernel has no netem qdisc (module sch_netem); use a kernel with it, or 'up none'" >&2
    return 1
  fi
  ip netns exec "$NS" tc qdisc replace dev "$PEER_IF" root netem delay "$d"
}

case "${1:-}" in
  up)
    DELAY="${2:-2ms}"
    ip netns add "$NS"
    ip link add "$HOST_IF" type veth peer name "$PEER_IF"
    ip link set "$PEER_IF" netns "$NS"
    ip addr add "$HOST_IP/24" dev "$HOST_IF"
    ip link set "$HOST_IF" up
    ip netns exec "$NS" ip addr add "$WORKER_IP/24" dev "$PEER_IF"
    ip netns exec "$NS" ip link set "$PEER_IF" up
    ip netns exec "$NS" ip link set lo up
    set_delay "$DELAY" || { "$0" down >/dev/null; exit 1; }
    mkdir -p "$RUN_DIR"
    eps=()
    for port in $PORTS; do
      ip netns exec "$NS" "$PY" -m ggufspec.cli rpc-server --host "$WORKER_IP" --port "$port" --threads "$THREADS" \
        >"$RUN_DIR/worker-$port.log" 2>&1 &
      echo $! >"$RUN_DIR/worker-$port.pid"
      eps+=("$WORKER_IP:$port")
    done
    # ready when each answers a TCP connect (ggufspec checks the protocol itself before use)
    for port in $PORTS; do
      for _ in $(seq 200); do
        if "$PY" -c "import socket,sys; socket.create_connection(('$WORKER_IP', $port), timeout=1).close()" 2>/dev/null; then
          break
        fi
        sleep 0.1
      done
    done
    if command -v ping >/dev/null; then ping -c 3 -q "$WORKER_IP" | tail -1; fi
    (IFS=,; echo "workers up, delay $DELAY each way: --rpc ${eps[*]}")
    ;;
  delay)
    set_delay "${2:?give a delay, like 0.5ms}"
    if command -v ping >/dev/null; then ping -c 3 -q "$WORKER_IP" | tail -1; fi
    ;;
  down)
    for f in "$RUN_DIR"/worker-*.pid; do
      [[ -f "$f" ]] && kill "$(cat "$f")" 2>/dev/null || true
      rm -f "$f"
    done
    ip link del "$HOST_IF" 2>/dev/null || true
    ip netns del "$NS" 2>/dev/null || true
    echo "removed $NS"
    ;;
  *)
    echo "usage: $0 up [DELAY] | delay DELAY | down" >&2
    exit 2
    ;;
esac
