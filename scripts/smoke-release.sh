#!/usr/bin/env bash
# The release tarball as a node receives it: unpacked into an empty directory, its
# edgeplug run with `env -i` (no PATH, so no node, no node_modules, nothing from the
# checkout) does one --reconcile-once pass against a sample plugin and must exit 0,
# with the plugin told it is registered. The sample plugin (examples/greeter-plugin.ts)
# is the only thing that uses Node, from node_modules, outside the agent's environment.
#
#   scripts/smoke-release.sh [dist/release/edgeplug-VERSION-linux-ARCH.tar.gz]
set -euo pipefail
cd "$(dirname "$0")/.."

version=$(node_modules/.bin/node -p 'require("./package.json").version')
arch=$(node_modules/.bin/node -p 'process.arch')
tarball=${1:-dist/release/edgeplug-$version-linux-$arch.tar.gz}
[ -f "$tarball" ] || { echo "smoke-release: $tarball is missing: run npm run release" >&2; exit 1; }

scratch=$(mktemp -d /tmp/ep-release-XXXXXX)
plugin_pid=
cleanup() {
  if [ -n "$plugin_pid" ]; then kill "$plugin_pid" 2>/dev/null || true; wait "$plugin_pid" 2>/dev/null || true; fi
  rm -rf "$scratch"
}
trap cleanup EXIT

mkdir "$scratch/unpacked"
tar -xzf "$tarball" -C "$scratch/unpacked"
bundle=$(echo "$scratch"/unpacked/edgeplug-*)
ls -l "$bundle"

# A policy like the shipped one, with every path in the scratch dir (the shipped
# one watches /var/lib/kubelet, which belongs to the machine running this).
mkdir "$scratch/registry"
cat >"$scratch/policy.yaml" <<EOF
version: 1
watch:
  - path: $scratch/registry
handlers:
  example.io/Greeter: { kind: generic, versions: [v1] }
devicePlugins: { registrationSocket: null }
checkpoint: { path: $scratch/state/kubelet_internal_checkpoint }
api: { socket: null, metrics: null }
EOF

node_modules/.bin/node examples/greeter-plugin.ts --dir "$scratch/registry" >"$scratch/plugin.log" 2>&1 &
plugin_pid=$!
for _ in $(seq 1 300); do
  [ -S "$scratch/registry/example.io_greeter.sock" ] && break
  kill -0 "$plugin_pid" 2>/dev/null || { cat "$scratch/plugin.log"; echo "smoke-release: the sample plugin exited" >&2; exit 1; }
  sleep 0.1
done
[ -S "$scratch/registry/example.io_greeter.sock" ] || { echo "smoke-release: the sample plugin never listened" >&2; exit 1; }

status=0
(cd "$bundle" && env -i ./edgeplug validate --config ./policy.yaml) || status=$?
[ "$status" -eq 0 ] || { echo "smoke-release: the shipped policy.yaml does not validate (exit $status)" >&2; exit 1; }
(cd "$bundle" && env -i ./edgeplug run --config "$scratch/policy.yaml" --reconcile-once --timeout 30s \
  --require example.io/greeter --output json >"$scratch/report.json") || status=$?
cat "$scratch/report.json"
[ "$status" -eq 0 ] || { echo "smoke-release: --reconcile-once exited $status, expected 0" >&2; exit 1; }
grep -q '"ok": true' "$scratch/report.json" || { echo "smoke-release: the report is not ok" >&2; exit 1; }
for _ in $(seq 1 100); do grep -qx registered "$scratch/plugin.log" && break; sleep 0.1; done
grep -qx registered "$scratch/plugin.log" || { cat "$scratch/plugin.log"; echo "smoke-release: the plugin was not told it is registered" >&2; exit 1; }
echo "smoke-release: $tarball unpacked into an empty dir, env -i edgeplug --reconcile-once: exit 0, plugin registered"
