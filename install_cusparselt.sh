#!/usr/bin/env bash
# `bash install_cusparselt.sh` from the project root, as the Jetson training guide writes it:
# runs scripts/install_cusparselt.sh with the same arguments (see its --help).
exec bash "$(dirname "${BASH_SOURCE[0]}")/scripts/install_cusparselt.sh" "$@"
