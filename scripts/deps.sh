#!/usr/bin/env bash
# Installs the Debian packages kvserve's build and tests need, when any is missing.
# Idempotent and silent when everything is present. Called by `make`, `make run`, `make test`.
set -euo pipefail
pkgs=(build-essential pkg-config libmicrohttpd-dev libcjson-dev libuv1-dev libcriterion-dev
      libpcre2-dev libcurl4-openssl-dev clang libclang-rt-14-dev python3 python3-jsonschema gnuplot-nox
      haproxy)
# Installed for this machine's architecture (a foreign-architecture -dev package, e.g. one
# installed for cross-building, does not count: it replaced the native one).
arch=$(dpkg --print-architecture)
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status} ${Architecture}\n' "$p" 2>/dev/null | grep -Eq "install ok installed ($arch|all)\$" ||
        missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
cmd="apt-get install -y --no-install-recommends ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
    echo "kvserve: missing packages; run as root:  apt-get update && $cmd" >&2
    exit 1
fi
echo "kvserve: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
$cmd -qq >/dev/null
