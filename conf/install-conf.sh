#!/bin/sh
# Run by `meson install` (conf/meson.build): installs the shipped mfmad.conf
# ($1) into the configuration directory ($2, absolute, under DESTDIR when
# staged) without overwriting the one there.  meson's install_data would
# replace it on every install, so re-running `setup.sh --install` to upgrade
# would silently undo the administrator's edits.  As dpkg does with a
# changed conffile: an existing file is kept, and a shipped one that differs
# is put beside it as mfmad.conf.new for the administrator to merge.
set -eu
src=$1
dir="${DESTDIR:-}$2"
mkdir -p "$dir"
if [ ! -e "$dir/mfmad.conf" ]; then
  install -m 0644 "$src" "$dir/mfmad.conf"
elif cmp -s "$src" "$dir/mfmad.conf"; then
  rm -f "$dir/mfmad.conf.new"
else
  install -m 0644 "$src" "$dir/mfmad.conf.new"
  echo "mfmad: kept $2/mfmad.conf as it is; the shipped configuration is $2/mfmad.conf.new" >&2
fi
