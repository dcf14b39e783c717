#!/usr/bin/env bash
# A two-node Ray cluster on this machine (a head and a second node, each with its own temp
# dir and one CPU, both on 127.0.0.1), evaluated with --ray.address; the per-episode
# results must equal the local executor's. Prints where the actors ran and the comparison.
#
#   bash bench/ray_two_nodes.sh            # MetaWorld reach+push x 3, expert
#   EPISODES=5 bash bench/ray_two_nodes.sh
#
# It stops only the Ray processes it started (by their temp dirs), never `ray stop` for all.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-.venv/bin}
EPISODES=${EPISODES:-3}
PORT=${PORT:-$((20000 + RANDOM % 20000))}
WORK=$(mktemp -d /tmp/rollbench-two-nodes.XXXX)
export RAY_AUTH_MODE=disabled RAY_USAGE_STATS_ENABLED=0
ARGS=(--env.type=metaworld --env.task=reach-v3,push-v3 --policy.type=expert "--eval.n_episodes=$EPISODES"
      --eval.max_episodes_rendered=0 --eval.report=false)

stop_nodes() {
  for dir in "$WORK/head" "$WORK/node2"; do
    pkill -9 -f -- "$dir" 2>/dev/null || true
  done
}
trap stop_nodes EXIT

t0=$(date +%s.%N)
"$BIN/ray" start --head --node-ip-address=127.0.0.1 --port="$PORT" --num-cpus=1 --include-dashboard=false \
  --temp-dir="$WORK/head" --disable-usage-stats >"$WORK/head.log" 2>&1
"$BIN/ray" start --address="127.0.0.1:$PORT" --node-ip-address=127.0.0.1 --num-cpus=1 \
  --temp-dir="$WORK/node2" --disable-usage-stats >"$WORK/node2.log" 2>&1 || {
  echo "second node: its own --temp-dir refused; starting it in the head's"; cat "$WORK/node2.log"
  "$BIN/ray" start --address="127.0.0.1:$PORT" --node-ip-address=127.0.0.1 --num-cpus=1 \
    --disable-usage-stats >"$WORK/node2.log" 2>&1
}
t1=$(date +%s.%N)
"$BIN/python" - "$PORT" <<'EOF'
import sys, ray
ray.init(address=f"127.0.0.1:{sys.argv[1]}", log_to_driver=False)
nodes = [n for n in ray.nodes() if n["Alive"]]
print(f"cluster: {len(nodes)} nodes, {ray.cluster_resources().get('CPU', 0):g} CPUs")
for n in nodes:
    print(f"  node {n['NodeID'][:8]} {n['NodeManagerAddress']} CPU={n['Resources'].get('CPU', 0):g} temp={n.get('ObjectStoreSocketName', '')[:60]}")
EOF
t2=$(date +%s.%N)
"$BIN/rollbench" eval "${ARGS[@]}" --executor=ray "--ray.address=127.0.0.1:$PORT" --ray.actors=2 \
  "--output_dir=$WORK/ray" >"$WORK/ray.out" 2>&1 || { cat "$WORK/ray.out"; exit 1; }
t3=$(date +%s.%N)
"$BIN/rollbench" eval "${ARGS[@]}" "--output_dir=$WORK/local" >"$WORK/local.out" 2>&1 || { cat "$WORK/local.out"; exit 1; }
t4=$(date +%s.%N)
"$BIN/python" - "$WORK" <<'EOF'
import json, sys
from pathlib import Path

def per_episode(d):
    info = json.loads((Path(d) / "eval_info.json").read_text())
    out = {}
    for t in info["per_task"]:
        m = t["metrics"]
        for i, ep in enumerate(m["episode_ix"]):
            out[(t["task_group"], t["task_id"], ep)] = (m["successes"][i], m["sum_rewards"][i], m["n_steps"][i], m["seeds"][i])
    return out, info

work = Path(sys.argv[1])
ray_eps, info = per_episode(work / "ray")
local_eps, _ = per_episode(work / "local")
workers = sorted({json.loads(l)["worker"] for p in (work / "ray" / "episodes").glob("*.jsonl") for l in p.read_text().splitlines()})
print(f"actors that ran episodes: {len(workers)} ({', '.join(workers)})")
print(f"scheduling: actors={info['scheduling']['actors']} cluster_cpus={info['scheduling']['cluster_cpus']:g} counts={info['scheduling']['counts']}")
same = ray_eps == local_eps
print(f"episodes compared: {len(local_eps)}; ray (two nodes) == local: {same}")
sys.exit(0 if same and len(local_eps) else 1)
EOF
printf 'cluster start %.1f s, ray eval %.1f s, local eval %.1f s\n' \
  "$(echo "$t1 - $t0" | bc)" "$(echo "$t3 - $t2" | bc)" "$(echo "$t4 - $t3" | bc)"
