#!/usr/bin/env bash
# mkdeb.sh BUILD_DIR OUT_DIR — builds OUT_DIR/kvserve_VERSION_ARCH.deb with dpkg-deb from an
# installed tree (make install PREFIX=/usr into a staging root): BUILD_DIR's binary as it is
# (`make deb` builds it first; this script never rebuilds it), the unit (run as
# the static kvserve system user), the documented config under /etc/kvserve (a conffile),
# sysusers.d/tmpfiles.d entries and the maintainer scripts in config/deb/. Depends are the
# Debian packages that own the libraries the binary links (libraries from elsewhere are not
# listed; the CUDA toolkit's cuBLAS is not linked but loaded on a GPU, and named in a note).
# Prints the .deb's path last.
set -euo pipefail
build=$1 out=$2
root=$(cd "$(dirname "$0")/.." && pwd)
stage=$build/deb/root
rm -rf "$build/deb"
mkdir -p "$stage/DEBIAN" "$out"
[ -x "$build/kvserve" ] || { echo "mkdeb: $build/kvserve not built (run make deb)" >&2; exit 1; }
make -s -C "$root" install -o "$build/kvserve" BUILD="$build" PREFIX=/usr DESTDIR="$stage" UNITDIR=/lib/systemd/system \
    SYSCONFDIR=/etc KVSERVE_UNIT_USER=kvserve >/dev/null
install -D -m 0644 "$root/config/deb/sysusers.conf" "$stage/usr/lib/sysusers.d/kvserve.conf"
install -D -m 0644 "$root/config/deb/tmpfiles.conf" "$stage/usr/lib/tmpfiles.d/kvserve.conf"
install -m 0755 "$root/config/deb/postinst" "$root/config/deb/prerm" "$stage/DEBIAN/"
echo /etc/kvserve/kvserve.conf >"$stage/DEBIAN/conffiles"
arch=$(dpkg --print-architecture)
# The release from VERSION; a checkout's build (not a tarball's, nor a repository's around one)
# adds the commit's date and hash.
version=$(cat "$root/VERSION")
if [ -e "$root/.git" ] && git -C "$root" rev-parse --short HEAD >/dev/null 2>&1; then
    version="$version~git$(git -C "$root" log -1 --format=%cd --date=format:%Y%m%d).$(git -C "$root" rev-parse --short HEAD)"
fi
# The packages owning the libraries the binary names itself (DT_NEEDED), not their own deps.
needed=$(readelf -d "$stage/usr/bin/kvserve" | sed -n 's/.*Shared library: \[\(.*\)\]/\1/p')
deps=$(for n in $needed; do
    lib=$(ldd "$stage/usr/bin/kvserve" | awk -v n="$n" '$1 == n && $3 ~ /^\// {print $3}')
    if [ -n "$lib" ]; then dpkg -S "$(readlink -f "$lib")" 2>/dev/null || dpkg -S "$lib" 2>/dev/null || true; fi
done | cut -d: -f1 | sort -u | paste -sd, | sed 's/,/, /g')
for n in $needed; do
    lib=$(ldd "$stage/usr/bin/kvserve" | awk -v n="$n" '$1 == n && $3 ~ /^\// {print $3}')
    if [ -n "$lib" ] && ! dpkg -S "$(readlink -f "$lib")" >/dev/null 2>&1 && ! dpkg -S "$lib" >/dev/null 2>&1; then
        echo "mkdeb: $n ($lib) is not from a Debian package: the target machine needs it too" \
             "(or build the package with make deb CUDA=0)" >&2
    fi
done
# A CUDA build does not link cuBLAS: it loads it when it starts on a GPU (cuda/cublas_dl.h).
blas=$(grep -ao 'libcublas\.so\.[0-9][0-9]*' "$stage/usr/bin/kvserve" | head -n 1 || true)
if [ -n "$blas" ]; then
    echo "mkdeb: this kvserve loads $blas (the CUDA toolkit's cuBLAS) when it runs on a GPU: GPU machines" \
         "need it on the loader's path (a CPU run does not)" >&2
fi
size=$(du -sk "$stage" | cut -f1)
cat >"$stage/DEBIAN/control" <<CTL
Package: kvserve
Version: $version
Architecture: $arch
Maintainer: kvserve developers <kvserve@localhost>
Installed-Size: $size
Depends: ${deps:-libc6}, adduser | systemd
Section: net
Priority: optional
Description: OpenAI-compatible LLM inference server
 kvserve serves Llama-family GGUF models over an OpenAI-compatible HTTP API with continuous
 batching, a paged KV cache and a radix prefix cache, on the CPU or a CUDA GPU. The package
 installs kvserve.service (enabled, not started), running as the kvserve system user with its
 configuration in /etc/kvserve/kvserve.conf and its model in /var/lib/kvserve.
CTL
deb="$out/kvserve_${version}_${arch}.deb"
dpkg-deb --root-owner-group -Zgzip --build "$stage" "$deb" >/dev/null
rm -rf "$build/deb"
echo "$deb"
