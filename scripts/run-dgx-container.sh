#!/usr/bin/env bash
# Run trainforge inside the DGX Spark container (image built from Dockerfile.dgx-spark), with
# everything that must outlive the container kept on the host (the DGX Spark setup plan's "Data Persistence").
#
# Usage: scripts/run-dgx-container.sh [--dry-run] [--image NAME] [--net-host] [--] [COMMAND...]
#   no COMMAND     an interactive shell in the project folder
#   COMMAND...     run it, e.g. trainforge train config/vit_digits.yaml
#   --dry-run      print the docker command instead of running it (secrets by name only)
#   --image NAME   image to run (default: $TRAINFORGE_IMAGE or trainforge-dgx-spark; where that
#                  is missing and the DGX Spark plan's own tag unsloth-dgx-spark exists, that one)
#   --net-host     share the host network (the DGX Spark plan uses --net=host); by default only
#                  TensorBoard's port 6006 is published, on 127.0.0.1
#
# Mounts (host -> container):
#   the project checkout         -> /workspace/trainforge (code edits show up at once)
#   $HF_HOME or ~/.cache/huggingface -> /root/.cache/huggingface (models download once)
#   $TRAINFORGE_RUNS_DIR or <project>/runs     -> /workspace/trainforge/runs (checkpoints)
#   $TRAINFORGE_MODELS_DIR or <project>/models -> /workspace/trainforge/models
#   ~/.wandb                     -> /root/.wandb (W&B settings and cache)
# WANDB_API_KEY, WANDB_PROJECT, WANDB_ENTITY and HF_TOKEN pass through by name when set: docker
# reads their values from this environment, so they never appear on a command line.
# Docker flags from the DGX Spark setup plan: --gpus=all --ipc=host (shared memory for data-loader workers)
# --ulimit memlock=-1 --ulimit stack=67108864, and --rm (all state lives in the mounts).
set -euo pipefail

PROJECT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WORKDIR="/workspace/trainforge"
DEFAULT_IMAGE="trainforge-dgx-spark"
# The DGX Spark setup plan builds its image as `docker build ... -t unsloth-dgx-spark .`.
PLAN_IMAGE="unsloth-dgx-spark"
IMAGE="${TRAINFORGE_IMAGE:-$DEFAULT_IMAGE}"
IMAGE_CHOSEN="${TRAINFORGE_IMAGE:+1}"
HF_CACHE_DIR="${HF_HOME:-${HOME}/.cache/huggingface}"
RUNS_DIR="${TRAINFORGE_RUNS_DIR:-${PROJECT_DIR}/runs}"
MODELS_DIR="${TRAINFORGE_MODELS_DIR:-${PROJECT_DIR}/models}"
WANDB_DIR="${HOME}/.wandb"
PASS_THROUGH=(WANDB_API_KEY WANDB_PROJECT WANDB_ENTITY HF_TOKEN)
DRY_RUN=0
NET_HOST=0

die() {
    echo "run-dgx-container.sh: $1. Fix: $2" >&2
    exit 2
}

usage() {
    sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'
}

parse_args() {
    while [ $# -gt 0 ]; do
        case "$1" in
            --dry-run) DRY_RUN=1 ;;
            --image)
                [ $# -ge 2 ] && [ -n "$2" ] || die "--image needs a name" "see --help"
                IMAGE="$2"
                IMAGE_CHOSEN=1
                shift
                ;;
            --net-host) NET_HOST=1 ;;
            -h | --help) usage; exit 0 ;;
            --) shift; break ;;
            -*) die "unknown option '$1'" "put the command after --, e.g. -- $1" ;;
            *) break ;;
        esac
        shift
    done
    COMMAND=("$@")
}

docker_args() {
    ARGS=(run --rm)
    # A terminal only when there is one: `-t` without a TTY fails in scripts and cron.
    if [ -t 0 ] && [ -t 1 ]; then ARGS+=(-it); else ARGS+=(-i); fi
    ARGS+=(--gpus=all --ipc=host --ulimit memlock=-1 --ulimit stack=67108864)
    if [ "$NET_HOST" = 1 ]; then
        ARGS+=(--net=host)
    else
        ARGS+=(-p 127.0.0.1:6006:6006)
    fi
    ARGS+=(-v "${PROJECT_DIR}:${WORKDIR}")
    ARGS+=(-v "${HF_CACHE_DIR}:/root/.cache/huggingface")
    ARGS+=(-v "${RUNS_DIR}:${WORKDIR}/runs")
    ARGS+=(-v "${MODELS_DIR}:${WORKDIR}/models")
    ARGS+=(-v "${WANDB_DIR}:/root/.wandb")
    ARGS+=(-e HF_HOME=/root/.cache/huggingface)
    local name
    for name in "${PASS_THROUGH[@]}"; do
        # `-e NAME` (no "=value"): docker copies the value from this environment.
        if [ -n "${!name:-}" ]; then ARGS+=(-e "$name"); fi
    done
    ARGS+=(-w "$WORKDIR" "$IMAGE")
    if [ ${#COMMAND[@]} -gt 0 ]; then ARGS+=("${COMMAND[@]}"); else ARGS+=(bash); fi
}

# The Docker daemon answers, or one line says why not: not running, or not this user's to use
# (without this, a stopped daemon would read as "image not found").
check_daemon() {
    local out reason
    out="$(docker info --format '{{.ServerVersion}}' 2>&1)" && return 0
    reason="$(grep -v '^[[:space:]]*$' <<<"$out" | tail -n 1 | cut -c 1-200)"
    case "$out" in
        *"ermission denied"*)
            die "this user may not use the Docker daemon (docker info: ${reason})" \
                "add the user to the docker group (sudo usermod -aG docker \$USER, then log in again)" ;;
        *)
            die "the Docker daemon is not running (docker info: ${reason:-no answer})" \
                "start it (sudo systemctl start docker) and run this again" ;;
    esac
}

# The image to run: the one asked for, or by default trainforge-dgx-spark, else the plan's
# tag when only that one was built (said in one line).
pick_image() {
    docker image inspect "$IMAGE" >/dev/null 2>&1 && return 0
    if [ -z "$IMAGE_CHOSEN" ] && docker image inspect "$PLAN_IMAGE" >/dev/null 2>&1; then
        echo "run-dgx-container.sh: image $DEFAULT_IMAGE not found; using $PLAN_IMAGE (the DGX Spark plan's tag)" >&2
        IMAGE="$PLAN_IMAGE"
        return 0
    fi
    die "image $IMAGE not found" "docker build -f Dockerfile.dgx-spark -t $IMAGE ."
}

main() {
    parse_args "$@"
    if [ "$DRY_RUN" = 1 ]; then
        docker_args
        local line
        line="$(printf '%q ' docker "${ARGS[@]}")"
        echo "${line% }"
        return 0
    fi
    command -v docker >/dev/null 2>&1 ||
        die "docker is not installed" "install Docker (docs/dgx_spark.md, 'Docker: command not found')"
    check_daemon
    pick_image
    docker_args
    # Create the mounted folders as this user; docker would create missing ones as root.
    mkdir -p "$HF_CACHE_DIR" "$RUNS_DIR" "$MODELS_DIR" "$WANDB_DIR"
    exec docker "${ARGS[@]}"
}

main "$@"
