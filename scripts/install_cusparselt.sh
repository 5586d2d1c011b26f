#!/usr/bin/env bash
# Install NVIDIA cuSPARSELt (libcusparseLt.so) for this machine's CUDA version and architecture.
#
# PyTorch builds for JetPack 6.1+ and recent CUDA wheels link libcusparseLt.so.0; without it
# `import torch` fails (the Jetson training guide: "run install_cusparselt.sh if you plan to use
# CuSPARSELt-accelerated kernels"). This script picks NVIDIA's redistributable archive for the
# CUDA release and the architecture (x86_64, sbsa = ARM servers such as DGX Spark, jetson =
# Jetson Orin's linux-aarch64 build), downloads it, and copies lib/ and include/ into the CUDA
# folder, as PyTorch's own CI script .ci/docker/common/install_cusparselt.sh does.
#
# Usage: scripts/install_cusparselt.sh [--dry-run] [--cuda X.Y] [--arch x86_64|sbsa|jetson]
#            [--version V] [--archive FILE] [--prefix DIR] [--no-ldconfig]
#   --dry-run      print what would be downloaded and run; change nothing
#   --cuda X.Y     CUDA release (default: $CUDA_VERSION, nvcc, /usr/local/cuda/version.json,
#                  version.txt, or the JetPack release in /etc/nv_tegra_release)
#   --arch A       x86_64, sbsa or jetson (default: $TARGETARCH or uname -m; aarch64 with
#                  /etc/nv_tegra_release is jetson, other aarch64 is sbsa)
#   --version V    cuSPARSELt release to install instead of the table's (e.g. 0.8.1.1)
#   --archive F    install from an archive already downloaded (offline machines)
#   --prefix DIR   CUDA folder to copy into (default /usr/local/cuda)
#   --no-ldconfig  do not refresh the loader cache afterwards
# Exit codes: 0 done (or dry run printed), 2 bad input or nothing known for this CUDA/arch.
set -euo pipefail

# Hidden for tests: another download server (CUSPARSELT_REDIST), and /etc and /usr/local/cuda
# read under another root (CUSPARSELT_ROOT).
REDIST="${CUSPARSELT_REDIST:-https://developer.download.nvidia.com/compute/cusparselt/redist/libcusparse_lt}"
ROOT="${CUSPARSELT_ROOT:-}"
DRY_RUN=0
CUDA="${CUDA_VERSION:-}"
CUDA_SOURCE="\$CUDA_VERSION"
ARCH=""
VERSION=""
ARCHIVE=""
PREFIX="/usr/local/cuda"
LDCONFIG=1

die() {
    # One line: what is wrong, then the fix.
    echo "install_cusparselt.sh: $1. Fix: $2" >&2
    exit 2
}

usage() {
    sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'
}

need_value() {
    [ $# -ge 2 ] && [ -n "$2" ] || die "$1 needs a value" "see --help"
}

parse_args() {
    while [ $# -gt 0 ]; do
        case "$1" in
            --dry-run) DRY_RUN=1 ;;
            --cuda) need_value "$@"; CUDA="$2"; CUDA_SOURCE="--cuda"; shift ;;
            --arch) need_value "$@"; ARCH="$2"; shift ;;
            --version) need_value "$@"; VERSION="$2"; shift ;;
            --archive) need_value "$@"; ARCHIVE="$2"; shift ;;
            --prefix) need_value "$@"; PREFIX="$2"; shift ;;
            --no-ldconfig) LDCONFIG=0 ;;
            -h | --help) usage; exit 0 ;;
            *) die "unknown argument '$1'" "see scripts/install_cusparselt.sh --help" ;;
        esac
        shift
    done
}

# CUDA release shipped by a JetPack, from its L4T release line. Same table as
# src/trainforge/hardware/jetson_wheels.py: R35 (JetPack 5.1.x) CUDA 11.4, R36.2/R36.3
# (JetPack 6.0) CUDA 12.2, R36.4 (JetPack 6.1/6.2) CUDA 12.6.
cuda_from_tegra_release() {
    local line major revision
    line="$(head -n 1 "$ROOT/etc/nv_tegra_release" 2>/dev/null)" || return 1
    major="$(sed -n 's/^# R\([0-9]*\) .*/\1/p' <<<"$line")"
    revision="$(sed -n 's/.*REVISION: \([0-9]*\).*/\1/p' <<<"$line")"
    case "$major.$revision" in
        35.*) echo "11.4" ;;
        36.2 | 36.3) echo "12.2" ;;
        36.4) echo "12.6" ;;
        *) return 1 ;;
    esac
}

detect_cuda() {
    [ -n "$CUDA" ] && return 0
    local found
    if command -v nvcc >/dev/null 2>&1 && [ -z "$ROOT" ]; then
        # "Cuda compilation tools, release 12.6, V12.6.68"
        found="$(nvcc --version | sed -n 's/.*release \([0-9][0-9]*\.[0-9][0-9]*\).*/\1/p')"
        [ -n "$found" ] && CUDA="$found" && CUDA_SOURCE="nvcc --version" && return 0
    fi
    if [ -f "$ROOT/usr/local/cuda/version.json" ]; then
        # {"cuda" : {"name" : "CUDA SDK", "version" : "13.0.1"}, ...}
        found="$(tr -d '\n' <"$ROOT/usr/local/cuda/version.json" |
            sed -n 's/.*"cuda"[^}]*"version"[^"]*"\([0-9]*\.[0-9]*\).*/\1/p')"
        [ -n "$found" ] && CUDA="$found" && CUDA_SOURCE="/usr/local/cuda/version.json" && return 0
    fi
    if [ -f "$ROOT/usr/local/cuda/version.txt" ]; then
        # "CUDA Version 11.4.315"
        found="$(sed -n 's/^CUDA Version \([0-9]*\.[0-9]*\).*/\1/p' "$ROOT/usr/local/cuda/version.txt")"
        [ -n "$found" ] && CUDA="$found" && CUDA_SOURCE="/usr/local/cuda/version.txt" && return 0
    fi
    if found="$(cuda_from_tegra_release)"; then
        CUDA="$found"
        CUDA_SOURCE="/etc/nv_tegra_release (JetPack's CUDA)"
        return 0
    fi
    die "cannot find the CUDA version (no nvcc, no /usr/local/cuda/version.json or version.txt)" \
        "pass --cuda X.Y, e.g. --cuda 12.6"
}

detect_arch() {
    local machine
    if [ -z "$ARCH" ]; then
        machine="${TARGETARCH:-$(uname -m)}"
        case "$machine" in
            x86_64 | amd64) ARCH="x86_64" ;;
            aarch64 | arm64)
                if [ -f "$ROOT/etc/nv_tegra_release" ]; then ARCH="jetson"; else ARCH="sbsa"; fi ;;
            *) die "unsupported machine '$machine'" "pass --arch x86_64, sbsa or jetson" ;;
        esac
    fi
    case "$ARCH" in
        x86_64 | sbsa | jetson) ;;
        *) die "unknown --arch '$ARCH'" "use x86_64, sbsa (ARM servers, DGX Spark) or jetson" ;;
    esac
}

# The archive for CUDA $1 on $2. Each row names its source; check the redist index
# ($REDIST/) before relying on one, and use --version when NVIDIA publishes a newer release.
#   x86_64/sbsa: PyTorch .ci/docker/common/install_cusparselt.sh (11.8: 0.4.0.7 x86_64 only,
#     12.1: 0.5.2.1, 12.2-12.4: 0.6.2.3, 12.5-12.9: 0.7.1.0) and install_cuda.sh
#     (13.x: 0.8.0.4, "_cuda13" archive).
#   jetson (linux-aarch64, the Tegra build): NVIDIA cuSPARSELt downloads page, target
#     aarch64-jetson; 0.6.3.2 is the release used with NVIDIA's JetPack 6.1 torch 2.5 wheel
#     (unverified offline). CUDA 13 Jetsons (Thor) use the sbsa archives.
archive_name() {
    local cuda="$1" arch="$2" version="" suffix="" path="$2" major minor
    major="${cuda%%.*}"
    minor="${cuda#*.}"
    minor="${minor%%.*}"
    [[ "$major" =~ ^[0-9]+$ && "$minor" =~ ^[0-9]+$ ]] || die "CUDA version '$cuda' is not X.Y" \
        "pass --cuda X.Y, e.g. --cuda 12.6"
    if [ "$arch" = "jetson" ]; then
        path="aarch64"
        case "$major" in
            12) version="0.6.3.2" ;;
            13) die "no Jetson (linux-aarch64) cuSPARSELt archive known for CUDA $cuda" \
                "Jetson Thor uses the SBSA builds: pass --arch sbsa" ;;
        esac
    else
        case "$major.$minor" in
            11.8) [ "$arch" = "x86_64" ] && version="0.4.0.7" ;;
            12.1) version="0.5.2.1" ;;
            12.2 | 12.3 | 12.4) version="0.6.2.3" ;;
            12.5 | 12.6 | 12.7 | 12.8 | 12.9) version="0.7.1.0" ;;
            13.*) version="0.8.0.4" suffix="_cuda13" ;;
        esac
    fi
    if [ -n "$VERSION" ]; then
        version="$VERSION"
        # 0.8 and later ship one archive per CUDA major release.
        case "$version" in 0.[0-7].*) suffix="" ;; *) suffix="_cuda$major" ;; esac
    fi
    [ -n "$version" ] || die "no cuSPARSELt archive known for CUDA $cuda (from $CUDA_SOURCE) on $arch" \
        "pick a release at $REDIST/linux-$path/ and pass --version V (or --archive FILE)"
    echo "linux-$path libcusparse_lt-linux-$path-$version${suffix}-archive"
}

# Whether $1, or the folder that would hold it, can be written without sudo.
writable() {
    local path="$1"
    while [ ! -e "$path" ]; do path="$(dirname "$path")"; done
    [ -w "$path" ]
}

# Print a command (shell-quoted) in dry-run mode; run it otherwise.
step() {
    if [ "$DRY_RUN" = 1 ]; then
        local line
        line="$(printf '%q ' "$@")"
        echo "  ${line% }"
    else
        "$@"
    fi
}

# Download $1 to $2; a failure ends on one line naming the server and curl's reason (its
# retry notices stay quiet).
download() {
    local url="$1" out="$2" host reason
    if [ "$DRY_RUN" = 1 ]; then
        step curl --fail --location --retry 3 --output "$out" "$url"
        return 0
    fi
    host="${url#*://}"
    host="${host%%/*}"
    if ! reason="$(curl --fail --location --retry 3 --silent --show-error \
        --output "$out" "$url" 2>&1)"; then
        reason="$(tail -n 1 <<<"$reason")"
        die "cannot reach $host to download $(basename "$url") (${reason:-curl failed})" \
            "check the network, or download $url on a machine that is online and pass --archive FILE"
    fi
}

main() {
    parse_args "$@"
    detect_cuda
    detect_arch
    local spec folder name url sudo=() work archive
    spec="$(archive_name "$CUDA" "$ARCH")" || exit $? # archive_name printed the error
    folder="${spec%% *}"
    name="${spec#* }"
    url="$REDIST/$folder/$name.tar.xz"
    echo "cuSPARSELt for CUDA $CUDA (from $CUDA_SOURCE) on $ARCH"
    echo "archive: $name.tar.xz"
    if [ -n "$ARCHIVE" ]; then
        echo "source: $ARCHIVE"
    else
        echo "url: $url"
    fi
    echo "install into: $PREFIX/include and $PREFIX/lib64"
    if [ "$(id -u)" != 0 ] && ! writable "$PREFIX"; then
        sudo=(sudo)
    fi
    if [ "$DRY_RUN" = 1 ]; then
        echo "dry run: would run"
        work="/tmp/cusparselt.XXXXXX"
    else
        if [ -z "$ARCHIVE" ] && ! command -v curl >/dev/null 2>&1; then
            die "curl is not installed" "sudo apt-get install -y curl, or pass --archive FILE"
        fi
        work="$(mktemp -d)"
        # shellcheck disable=SC2064  # expand $work now: it is local to main
        trap "rm -rf '$work'" EXIT
    fi
    archive="$work/$name.tar.xz"
    if [ -n "$ARCHIVE" ]; then
        [ "$DRY_RUN" = 1 ] || [ -f "$ARCHIVE" ] || die "archive $ARCHIVE not found" "check the path"
        archive="$ARCHIVE"
    else
        download "$url" "$archive"
    fi
    step tar -xJf "$archive" -C "$work"
    if [ "$DRY_RUN" != 1 ] && ! [ -d "$work/$name/lib" ]; then
        die "$archive has no $name/lib folder" "pass the archive NVIDIA ships for this CUDA/arch"
    fi
    step "${sudo[@]}" mkdir -p "$PREFIX/include" "$PREFIX/lib64"
    step "${sudo[@]}" cp -a "$work/$name/include/." "$PREFIX/include/"
    step "${sudo[@]}" cp -a "$work/$name/lib/." "$PREFIX/lib64/"
    if [ "$LDCONFIG" = 1 ]; then
        step "${sudo[@]}" ldconfig
    fi
    if [ "$DRY_RUN" != 1 ]; then
        echo "installed: $(find "$PREFIX/lib64" -maxdepth 1 -name 'libcusparseLt.so*' | head -n 1)"
        echo "check: python3 -c 'import torch; print(torch.backends.cusparselt.version())'"
    fi
}

main "$@"
