#!/bin/sh
# Run by `meson install` (systemd/meson.build) with the installed sysusers.d
# file as $1.  A package's postinst would run systemd-sysusers; a plain
# `meson install` has none, and without it the mfmad group would only appear
# at the next boot, leaving the socket of a daemon started by hand usable by
# root alone.  So, on a live install as root:
# - create the mfmad user and group now (systemd-sysusers, else useradd);
# - make /run/mfmad group mfmad and set-group-ID, so the socket a daemon
#   running as root creates there is root:mfmad 0660: usable by the group.
set -eu
if [ -n "${DESTDIR:-}" ]; then
  exit 0 # staged for a package: its postinst does this on the target
fi
if [ "$(id -u)" != 0 ]; then
  echo "mfmad: not root, so the mfmad group was not created; as root: systemd-sysusers $1"
  exit 0
fi
if command -v systemd-sysusers >/dev/null 2>&1; then
  systemd-sysusers "$1" || true
fi
# Where systemd-sysusers is missing or did nothing (it skips a file it
# cannot read and still succeeds).
getent group mfmad >/dev/null || groupadd --system mfmad
getent passwd mfmad >/dev/null ||
  useradd --system --gid mfmad --home-dir /var/lib/mfmad --no-create-home \
    --shell /usr/sbin/nologin --comment "mfmad GEMM inference daemon" mfmad
mkdir -p /run/mfmad
chgrp mfmad /run/mfmad
chmod 2755 /run/mfmad
echo "mfmad: group mfmad ready; let a user talk to /run/mfmad/mfmad.sock with: usermod -aG mfmad USER"
