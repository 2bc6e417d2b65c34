#!/usr/bin/env bash
# Gathers, HERE (a Debian machine with network access to Debian's archive), the build
# dependencies that the GPU machine's image may lack (OpenBLAS, CLI11, nlohmann-json,
# zlib headers), unpacked under .gpu-deps/ (ignored by git). Carry that folder to the
# device machine (the device tool's `carry: [".gpu-deps"]`); scripts/gpu-check uses it
# when the system has no copy of its own. The libraries are Debian 12's; they need only
# glibc, which the device image has in a newer version.
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.gpu-deps/' .git/info/exclude 2>/dev/null || echo '/.gpu-deps/' >> .git/info/exclude
rm -rf .gpu-deps && mkdir -p .gpu-deps/debs
(cd .gpu-deps/debs && apt-get download libopenblas0-pthread libopenblas-pthread-dev libopenblas-dev \
   libcli11-dev nlohmann-json3-dev zlib1g zlib1g-dev libgfortran5)
for deb in .gpu-deps/debs/*.deb; do dpkg-deb -x "$deb" .gpu-deps; done
rm -rf .gpu-deps/debs .gpu-deps/usr/share/doc .gpu-deps/usr/share/man
find .gpu-deps \( -name "*.a" -o -name "liblapack*" \) -delete   # not needed, and too big to carry
# Absolute symlinks point into this machine's /lib: make them point inside .gpu-deps.
ln -sf ../../../lib/x86_64-linux-gnu/libz.so.1 .gpu-deps/usr/lib/x86_64-linux-gnu/libz.so
du -sh .gpu-deps
