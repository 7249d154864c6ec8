#!/bin/sh
# Two "hosts" on one machine: two network namespaces joined by a veth pair
# (10.77.0.1 and 10.77.0.2), each with its own host name, and Open MPI
# between them over TCP only (btl tcp,self). mpirun runs in the first
# namespace and starts the rank of the second through an rsh agent that
# enters that namespace (where ssh would log in to a real second host).
# Runs the dist suite (test_dist) and keel-dp-train's LeNet across them.
# Needs root (ip netns, veth). The meson option dist_two_hosts adds it to
# the tests as core-dist-two-hosts; or run it by hand:
#   sh tools/dist_two_hosts.sh BUILD_DIR
set -eu
build=$(cd "${1:-build}" && pwd)
command -v ip >/dev/null || { echo "SKIP: no ip (iproute2)"; exit 77; }
[ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root for network namespaces"; exit 77; }
command -v mpirun >/dev/null || { echo "SKIP: no mpirun (openmpi-bin)"; exit 77; }
tag=$$
h1=keel-h1-$tag h2=keel-h2-$tag v1=kv1-$tag v2=kv2-$tag
tmp=$(mktemp -d)
cleanup() {
  ip netns del "$h1" 2>/dev/null || true
  ip netns del "$h2" 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT INT TERM
ip netns add "$h1"
ip netns add "$h2"
ip link add "$v1" type veth peer name "$v2"
ip link set "$v1" netns "$h1"
ip link set "$v2" netns "$h2"
ip -n "$h1" addr add 10.77.0.1/24 dev "$v1"
ip -n "$h2" addr add 10.77.0.2/24 dev "$v2"
for n in "$h1" "$h2"; do ip -n "$n" link set lo up; done
ip -n "$h1" link set "$v1" up
ip -n "$h2" link set "$v2" up
cat > "$tmp/agent" <<EOA
#!/bin/sh
host=\$1; shift
case \$host in
  10.77.0.1) ns=$h1 ;;
  10.77.0.2) ns=$h2 ;;
  *) echo "agent: unknown host \$host" >&2; exit 1 ;;
esac
exec ip netns exec "\$ns" unshare --uts sh -c "hostname \$ns; \$*"
EOA
chmod +x "$tmp/agent"
printf '10.77.0.1 slots=1\n10.77.0.2 slots=1\n' > "$tmp/hosts"
run() {
  ip netns exec "$h1" unshare --uts sh -c "hostname $h1; exec \"\$@\"" sh \
    env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    mpirun --hostfile "$tmp/hosts" -np 2 --bind-to none \
      --mca plm_rsh_agent "$tmp/agent" --mca btl tcp,self \
      --mca btl_tcp_if_include 10.77.0.0/24 \
      --mca oob_tcp_if_include 10.77.0.0/24 \
      -x KEEL_PLUGIN_PATH="$build/plugins/cpu" -x KEEL_PLUGIN_DEFAULT_PATHS=0 \
      -x KEEL_CPU_THREADS=1 -x OPENBLAS_NUM_THREADS=1 \
      -x LD_LIBRARY_PATH="$build/core" "$@"
}
echo "== dist suite across two namespaces (TCP)"
run "$build/core/tests/test_dist" > "$tmp/suite.txt" 2>&1 || { cat "$tmp/suite.txt"; exit 1; }
cat "$tmp/suite.txt"
n=$(grep -cE '^ +tests +8 +8 +8 +0' "$tmp/suite.txt" || true)
[ "$n" -eq 2 ] || { echo "FAIL: expected both ranks to pass 8 of 8 tests, $n did"; exit 1; }
echo "== keel-dp-train LeNet across two namespaces (TCP)"
run "$build/examples/dist/keel-dp-train" --model lenet --steps 150 --batch 32 > "$tmp/dp.txt" 2>&1 || { cat "$tmp/dp.txt"; exit 1; }
cat "$tmp/dp.txt"
grep -q "(identical on every rank)" "$tmp/dp.txt" || { echo "FAIL: ranks differ"; exit 1; }
echo "OK: two hosts (network namespaces, TCP)"
