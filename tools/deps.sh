#!/usr/bin/env bash
# tools/deps.sh — installs what hanayo needs to build, test or fuzz, when it
# is missing; `make run`, `make test` and .ci/run call it first.
#
#   bash tools/deps.sh build   a C compiler, pkg-config, jansson's static
#                              library, OpenBLAS (cblas): `make`, `make run`
#   bash tools/deps.sh test    build's, python3 with numpy (tests/*.py), and
#                              an MPI with mpicc and mpirun (data parallelism
#                              across processes, tests/test_dp.sh)
#   bash tools/deps.sh fuzz    build's, and clang with its libFuzzer runtime
#                              (`make fuzz`)
#   bash tools/deps.sh data    a python3 with Hugging Face `tokenizers`
#                              (tools/prepare_data.py): PATH's or the
#                              system's if it has it, else a virtual
#                              environment .venv-data/ in the repository,
#                              made with python3 -m venv and pip (PyPI);
#                              `test` does this too (test_prepare_data.sh)
#   bash tools/deps.sh data-python   prints that python3's path (exit 1 when
#                              there is none yet)
#
# Each need is probed by what it is for (a header that compiles, a library
# that links, a module that imports), not by package name, so a machine
# that has them some other way installs nothing. When everything is there
# it prints nothing and exits 0. Otherwise it installs the missing Debian
# packages with apt-get (through sudo when not root), or, where it cannot
# (no apt-get, no sudo), prints one line naming the packages and exits 1.
# The CUDA toolkit is not installed here: the CUDA backend is built when
# nvcc is present and left out otherwise (Makefile).
set -u

cc=${CC:-gcc}
[ "$cc" = cc ] && cc=gcc
missing=()

need() { missing+=("$@"); }

# probe_link HEADER LIBS CODE: a program including HEADER and running CODE
# compiles and links with LIBS.
probe_link() {
    printf '#include <%s>\nint main(void) { %s; return 0; }\n' "$1" "$3" |
        "$cc" -x c - -o /dev/null $2 >/dev/null 2>&1
}

probe_build() {
    if ! command -v "$cc" >/dev/null 2>&1 || ! command -v make >/dev/null 2>&1; then
        need build-essential
        return   # nothing below can be probed without a compiler
    fi
    command -v pkg-config >/dev/null 2>&1 || need pkg-config
    # The Makefile links jansson statically (build/hanayo runs anywhere).
    local dir lib=""
    dir=$(pkg-config --variable=libdir jansson 2>/dev/null)
    if [ -n "$dir" ] && [ -f "$dir/libjansson.a" ]; then lib=$dir/libjansson.a; fi
    [ -n "$lib" ] || lib=$("$cc" -print-file-name=libjansson.a 2>/dev/null)
    case "$lib" in /*) [ -f "$lib" ] || need libjansson-dev ;; *) need libjansson-dev ;; esac
    probe_link cblas.h "${BLAS_LIBS:--lopenblas}" \
        'float x = 1; volatile float d = cblas_sdot(1, &x, 1, &x, 1); (void)d' || need libopenblas-dev
}

# The first of PATH's python3 and the system's that has numpy (Makefile).
probe_python() {
    local p
    for p in python3 /usr/bin/python3; do
        "$p" -c 'import numpy' >/dev/null 2>&1 && return
    done
    command -v python3 >/dev/null 2>&1 || need python3
    need python3-numpy
}

# MPI is optional for a build (the Makefile compiles it in when mpicc is
# there) but the tests run `mpirun -np 2 hanayo train`.
probe_mpi() {
    command -v mpicc >/dev/null 2>&1 && command -v mpirun >/dev/null 2>&1 && return
    need libopenmpi-dev openmpi-bin
}

probe_fuzz() {
    local fcc=${FUZZ_CC:-clang}
    if ! command -v "$fcc" >/dev/null 2>&1; then
        need clang
        return
    fi
    printf 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { return d && n; }\n' |
        "$fcc" -fsanitize=fuzzer,address,undefined -x c - -o /dev/null >/dev/null 2>&1 && return
    # libFuzzer's runtime is libclang-rt-N-dev, N the clang's major version
    # (Debian 12: 14), which clang only recommends.
    need "libclang-rt-$("$fcc" -dumpversion | cut -d. -f1)-dev"
}

# tokenizers has no Debian package: it comes from PyPI into a virtual
# environment beside the repository's build outputs, never into the system's
# python (Debian's is externally managed).
data_venv="$(cd "$(dirname "$0")/.." && pwd)/.venv-data"
make_venv=0

# The first python3 that imports tokenizers: PATH's, the system's, the venv's.
data_python() {
    local p
    for p in python3 /usr/bin/python3 "$data_venv/bin/python3"; do
        if "$p" -c 'import tokenizers' >/dev/null 2>&1; then
            command -v "$p"
            return 0
        fi
    done
    return 1
}

probe_data() {
    data_python >/dev/null && return
    if ! command -v python3 >/dev/null 2>&1; then
        need python3 python3-venv
    else
        # Debian splits venv's pip bootstrap (ensurepip) into python3-venv.
        python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || need python3-venv
    fi
    make_venv=1
}

install_venv() {
    ((make_venv)) || return 0
    echo "installing: tokenizers (PyPI) into $data_venv"
    if ! python3 -m venv "$data_venv" >/dev/null ||
        ! "$data_venv/bin/python3" -m pip install -q --disable-pip-version-check tokenizers; then
        echo "could not install the Python package tokenizers into $data_venv; install it" \
            "(pip install tokenizers) for a python3 on PATH and run again" >&2
        exit 1
    fi
}

case "${1:-}" in
build) probe_build ;;
test) probe_build; probe_python; probe_mpi; probe_data ;;
fuzz) probe_build; probe_fuzz ;;
data) probe_data ;;
data-python) data_python; exit ;;
*) echo "usage: bash tools/deps.sh build|test|fuzz|data|data-python" >&2; exit 2 ;;
esac

if ! ((${#missing[@]})); then
    install_venv
    exit 0
fi

sudo=()
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true >/dev/null 2>&1; then
        sudo=(sudo -n)
    else
        echo "hanayo needs: ${missing[*]} (Debian packages); install them as root (apt-get install ${missing[*]}) and run make again" >&2
        exit 1
    fi
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "hanayo needs: ${missing[*]} (Debian package names; no apt-get here: install their equivalents) and run make again" >&2
    exit 1
fi
echo "installing: ${missing[*]}"
apt=("${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -q -o Dpkg::Use-Pty=0)
# Update first only when the package lists are empty (a fresh image);
# retry with an update when an install fails on stale lists.
if [ -z "$(ls -A /var/lib/apt/lists 2>/dev/null | grep -v -e '^lock$' -e '^partial$')" ]; then
    "${apt[@]}" update >/dev/null || { echo "apt-get update failed" >&2; exit 1; }
fi
if ! "${apt[@]}" install -y "${missing[@]}" >/dev/null; then
    "${apt[@]}" update >/dev/null && "${apt[@]}" install -y "${missing[@]}" >/dev/null || {
        echo "could not install ${missing[*]} with apt-get; install them and run make again" >&2
        exit 1
    }
fi
install_venv
