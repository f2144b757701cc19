#!/usr/bin/env bash
# tools/gpu-prepare.sh — packs what tools/gpu-check.sh runs on a GPU machine.
#
# The GPU machine has the CUDA toolkit, python3 and PyTorch, but no
# package manager reach, no jansson and no OpenBLAS. So this builds hanayo
# here, with the CUDA backend (jansson and cudart are linked statically;
# cuBLASLt is found in the toolkit there through the rpath), and packs into
# .gpu/ (ignored by git, carried to the machine):
#   bin/*.xz        hanayo, hanayo-bench-copy and the CUDA test programs, stripped
#   lib/*.xz        OpenBLAS and the Fortran runtime it needs (the CPU
#                   backend is in the same binary; the tests compare with it)
#   sysroot/        jansson's and OpenBLAS's headers and libjansson.a, from
#                   Debian packages (apt-get download + dpkg -x), so the
#                   machine can rebuild from source if the carried binaries
#                   do not start there
# Compressed, since everything carried counts against a 64 MiB limit; the
# check script unpacks with python3's lzma. Run from the repository root.
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD=${BUILD:-build-gpu}
# NO_MPI: the GPU machine has no MPI runtime, and one process needs none.
make -j"$(nproc)" BUILD="$BUILD" NO_MPI=1 all tests

rm -rf .gpu
mkdir -p .gpu/bin .gpu/lib .gpu/sysroot
for f in hanayo hanayo-bench-copy tests/test_cuda tests/test_mailbox tests/test_backend; do
    strip -o ".gpu/bin/$(basename "$f")" "$BUILD/$f"
done
# Every shared library the binaries need that a bare CUDA image may lack:
# all but the C runtime, the C++ runtime and cuBLASLt (which the toolkit
# there provides).
ldd "$BUILD/hanayo" | awk '$3 ~ /^\// {print $3}' |
    grep -Ev '/(libc|libm|libdl|librt|libpthread|ld-linux[^/]*|libstdc\+\+|libgcc_s|libcublasLt|libcublas)\.so' |
    while read -r lib; do cp -L "$lib" .gpu/lib/; done
# OpenBLAS's own dependencies (libgfortran, libquadmath).
for lib in .gpu/lib/*; do
    # (grep finds nothing in a library that needs neither: not an error.)
    { ldd "$lib" | awk '$3 ~ /^\// {print $3}' | grep -E 'gfortran|quadmath' || true; } |
        while read -r dep; do cp -L "$dep" .gpu/lib/; done
done
xz -T0 -6 .gpu/bin/* .gpu/lib/*

# For a rebuild there: jansson (static) and the BLAS headers.
tmp=$(mktemp -d)
(cd "$tmp" && apt-get download libjansson-dev libjansson4 >/dev/null 2>&1) || true
for deb in "$tmp"/*.deb; do [ -e "$deb" ] && dpkg -x "$deb" .gpu/sysroot; done
rm -rf "$tmp"
mkdir -p .gpu/sysroot/include
for h in cblas.h openblas_config.h; do
    p=$(find /usr/include -name "$h" | head -1)
    [ -n "$p" ] && cp -L "$p" .gpu/sysroot/include/
done

du -sh .gpu
echo "packed .gpu/: carry it to the GPU machine and run tools/gpu-check.sh there"
