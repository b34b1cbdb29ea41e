#!/usr/bin/env bash
# Installs the Debian packages kvserve's build and tests need, when any is missing.
# Idempotent and silent when everything is present. Called by `make`, `make run`, `make test`.
#
#   scripts/deps.sh --arm64 SYSROOT   also what `make test-arm64` needs: the aarch64 cross
#       compiler and qemu-user, and in SYSROOT the arm64 runtime libraries of the test runner
#       (Criterion and its dependencies, cJSON, PCRE2, glibc). Those are downloaded with
#       `apt-get download` and unpacked there rather than installed: Debian 12's arm64
#       libcriterion cannot be installed next to the native one.
set -euo pipefail
arm64_sysroot=
if [ "${1:-}" = --arm64 ]; then
    arm64_sysroot=${2:?usage: deps.sh --arm64 SYSROOT}
fi
pkgs=(build-essential pkg-config libmicrohttpd-dev libcjson-dev libuv1-dev libcriterion-dev
      libpcre2-dev libcurl4-openssl-dev clang libclang-rt-14-dev python3 python3-jsonschema gnuplot-nox
      haproxy)
# Installed for this machine's architecture (a foreign-architecture -dev package, e.g. one
# installed for cross-building, does not count: it replaced the native one).
arch=$(dpkg --print-architecture)
# qemu-x86_64 runs the binary on emulated CPUs without AVX-512 (and without AVX) in `make test`.
[ "$arch" = amd64 ] && pkgs+=(qemu-user)
[ -n "$arm64_sysroot" ] && pkgs+=(gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user)
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status} ${Architecture}\n' "$p" 2>/dev/null | grep -Eq "install ok installed ($arch|all)\$" ||
        missing+=("$p")
done
export DEBIAN_FRONTEND=noninteractive
if [ ${#missing[@]} -gt 0 ]; then
    cmd="apt-get install -y --no-install-recommends ${missing[*]}"
    if [ "$(id -u)" -ne 0 ]; then
        echo "kvserve: missing packages; run as root:  apt-get update && $cmd" >&2
        exit 1
    fi
    echo "kvserve: installing ${missing[*]}" >&2
    apt-get update -qq >/dev/null
    $cmd -qq >/dev/null
fi
[ -z "$arm64_sysroot" ] && exit 0

# The arm64 runtime of the test runner, unpacked into the sysroot once.
[ -e "$arm64_sysroot/.complete" ] && exit 0
roots=(libcriterion3:arm64 libcjson1:arm64 libpcre2-8-0:arm64 libc6:arm64)
if ! apt-cache show libcriterion3:arm64 >/dev/null 2>&1; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "kvserve: the arm64 package lists are missing; run as root:  dpkg --add-architecture arm64 && apt-get update" >&2
        exit 1
    fi
    echo "kvserve: adding the arm64 architecture to apt (package lists only; nothing arm64 is installed)" >&2
    dpkg --add-architecture arm64
    apt-get update -qq >/dev/null
fi
closure=$(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks --no-replaces \
              --no-enhances "${roots[@]}" | grep -E '^[a-z0-9][a-z0-9.+-]*:arm64$' | sort -u)
dl=$(mktemp -d)
chmod 755 "$dl" # apt-get download fetches as the _apt user
trap 'rm -rf "$dl"' EXIT
echo "kvserve: downloading $(echo "$closure" | wc -w) arm64 packages into $arm64_sysroot" >&2
# shellcheck disable=SC2086
(cd "$dl" && apt-get download -qq $closure >/dev/null)
mkdir -p "$arm64_sysroot"
for deb in "$dl"/*.deb; do dpkg-deb -x "$deb" "$arm64_sysroot"; done
[ -e "$arm64_sysroot/lib/ld-linux-aarch64.so.1" ] || { echo "kvserve: no arm64 loader in $arm64_sysroot" >&2; exit 1; }
touch "$arm64_sysroot/.complete"
