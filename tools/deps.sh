#!/bin/sh
# deps.sh [PACKAGE...] - install the Debian packages sluice needs to build,
# run, test and bench (or the ones named), when any is missing. As root it
# runs apt-get; otherwise it prints the line.
set -e
PKGS="gcc make pkg-config libevent-dev libhiredis-dev libinih-dev libssl-dev
redis-server redis-sentinel redis-tools python3-redis python3-pytest nutcracker nodejs systemd
prometheus"
[ $# -eq 0 ] || PKGS="$*"
missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" ||
        missing="$missing $p"
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" != 0 ]; then
    echo "sluice needs these Debian packages:$missing" >&2
    echo "run as root:  apt-get update && apt-get install -y$missing" >&2
    exit 1
fi
echo "installing:$missing" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -q >/dev/null
# shellcheck disable=SC2086
apt-get install -y -q --no-install-recommends $missing >/dev/null
