#!/usr/bin/env bash
# systemd-analyze verify on packaging/edgeplug.service, installed as a node would have
# it: in a scratch root (--root) holding the unit at /etc/systemd/system, a real
# edgeplug executable at its ExecStart path, `kill` for ExecReload and the system's own
# units (for the targets it is ordered against). Any message fails: systemd-analyze
# exits 0 on unknown keys and bad values and only prints them. Also prints
# `systemd-analyze security`'s offline exposure score for the record.
#
#   scripts/verify-unit.sh [EXECUTABLE]     (default dist/edgeplug)
set -euo pipefail
cd "$(dirname "$0")/.."

executable=${1:-dist/edgeplug}
unit=packaging/edgeplug.service
command -v systemd-analyze >/dev/null || { echo "verify-unit: systemd-analyze is missing (apt-get install systemd)" >&2; exit 1; }
[ -x "$executable" ] || { echo "verify-unit: $executable is missing: build it first" >&2; exit 1; }
exec_path=$(sed -n 's/^ExecStart=\([^ ]*\).*/\1/p' "$unit")
[ -n "$exec_path" ] || { echo "verify-unit: no ExecStart in $unit" >&2; exit 1; }

root=$(mktemp -d /tmp/ep-unit-XXXXXX)
trap 'rm -rf "$root"' EXIT
mkdir -p "$root/etc/systemd/system" "$root/usr/lib/systemd" "$root/usr/bin" "$root$(dirname "$exec_path")"
cp "$unit" "$root/etc/systemd/system/edgeplug.service"
# A hard link when the scratch root shares the file system: no 100 MiB copy.
ln "$executable" "$root$exec_path" 2>/dev/null || cp "$executable" "$root$exec_path"
cp -r /usr/lib/systemd/system "$root/usr/lib/systemd/"
cp "$(type -P kill)" "$root/usr/bin/kill"

output=$(systemd-analyze verify --man=no --root="$root" /etc/systemd/system/edgeplug.service 2>&1) || {
  echo "$output" >&2
  echo "verify-unit: systemd-analyze verify failed" >&2
  exit 1
}
if [ -n "$output" ]; then
  echo "$output" >&2
  echo "verify-unit: systemd-analyze verify reported problems" >&2
  exit 1
fi
echo "verify-unit: systemd-analyze verify accepts $unit ($(systemd-analyze --version | head -n 1))"
systemd-analyze security --offline=true --root="$root" /etc/systemd/system/edgeplug.service 2>/dev/null | tail -n 1 || true
