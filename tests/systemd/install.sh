#!/bin/sh
# A re-install keeps the administrator's configuration: `meson install` into
# a scratch DESTDIR twice, with an edit in between, then once more with the
# shipped file back in place.
#
# usage: install.sh BUILD_DIR SHIPPED_CONF
set -eu
build=$1 shipped=$2
fail() { echo "FAIL: $*" >&2; exit 1; }
tmp=$(mktemp -d /tmp/mfmad-install-XXXXXX)
# meson install rewrites the build's install log, which `setup.sh
# --uninstall` reads to remove a real install: keep it as it was.
log="$build/meson-logs/install-log.txt"
if [ -e "$log" ]; then
  cp -p "$log" "$tmp/install-log.txt"
  trap 'cp -p "$tmp/install-log.txt" "$log"; rm -rf "$tmp"' EXIT
else
  trap 'rm -f "$log"; rm -rf "$tmp"' EXIT
fi

stage() {
  meson install -C "$build" --no-rebuild --destdir "$tmp/root" > "$tmp/install.log" 2>&1 ||
    { cat "$tmp/install.log"; fail "meson install failed"; }
}

stage
conf=$(find "$tmp/root" -path '*/etc/mfmad/mfmad.conf' | head -n 1)
[ -n "$conf" ] || fail "no etc/mfmad/mfmad.conf installed"
cmp -s "$conf" "$shipped" || fail "the first install is not the shipped configuration"
[ ! -e "$conf.new" ] || fail "a first install left $conf.new"

echo 'limits = { max_connections = 7; };  # the administrator was here' >> "$conf"
stage
grep -q 'the administrator was here' "$conf" || fail "a re-install overwrote the edited $conf"
cmp -s "$conf.new" "$shipped" || fail "the shipped configuration is not beside it as $conf.new"

cp "$shipped" "$conf"
stage
cmp -s "$conf" "$shipped" || fail "the shipped configuration changed on a re-install"
[ ! -e "$conf.new" ] || fail "$conf.new stayed once the file was the shipped one again"
echo "ok: an edited configuration outlives a re-install; the shipped one lands beside it"
