#!/usr/bin/env bash
# Install Debian packages by name, refreshing the package lists first (they may be empty on a new machine).
set -euo pipefail
if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "$@"
