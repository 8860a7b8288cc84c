#!/bin/sh
# The man pages: groff renders them without a single warning, man(1) and
# lexgrog(1) read them, each has the sections of a complete page, and they
# stay in sync with what they document (every key of conf/mfmad.conf, every
# metric family of daemon/metrics.c, every long option of `mfmad --help` and
# `mfmactl --help`).
#
# usage: man.sh MANDIR SRCDIR [MFMAD_BINARY [MFMACTL_BINARY]]
set -eu

mandir=$1 src=$2 mfmad=${3:-} mfmactl=${4:-}
fail() { echo "FAIL: $*" >&2; exit 1; }

tmp=$(mktemp -d /tmp/mfmad-man-XXXXXX)
trap 'rm -rf "$tmp"' EXIT

pages=$(ls "$mandir"/*.[0-9] 2>/dev/null || true)
[ -n "$pages" ] || fail "no man pages in $mandir"

# man(1) and lexgrog(1) come with man-db; without it only groff checks.
have_man=""
if command -v man > /dev/null && command -v lexgrog > /dev/null; then
	have_man=yes
else
	echo "note: man-db is not installed; man -l and lexgrog are not run"
fi

for page in $pages; do
	name=$(basename "$page")
	# -ww: every warning; -z: no output, only the diagnostics.
	LC_ALL=C.UTF-8 groff -man -Tutf8 -ww -z "$page" > "$tmp/groff.txt" 2>&1 ||
		{ cat "$tmp/groff.txt"; fail "$name: groff failed"; }
	[ ! -s "$tmp/groff.txt" ] || { cat "$tmp/groff.txt"; fail "$name: groff warnings"; }
	if [ -n "$have_man" ]; then
		MANWIDTH=80 LC_ALL=C.UTF-8 man --warnings -l "$page" > "$tmp/man.txt" 2> "$tmp/man.err" ||
			{ cat "$tmp/man.err"; fail "$name: man -l failed"; }
		[ ! -s "$tmp/man.err" ] || { cat "$tmp/man.err"; fail "$name: man -l warnings"; }
		[ "$(wc -l < "$tmp/man.txt")" -gt 20 ] || fail "$name: man -l rendered almost nothing"
		# lexgrog parses NAME the way mandb/whatis/apropos will.
		lexgrog "$page" > "$tmp/lexgrog.txt" 2>&1 ||
			{ cat "$tmp/lexgrog.txt"; fail "$name: lexgrog"; }
		grep -q ' - ' "$tmp/lexgrog.txt" || fail "$name: no whatis line: $(cat "$tmp/lexgrog.txt")"
	fi

	case $name in
	*.5) want="NAME|SYNOPSIS|DESCRIPTION|SETTINGS|FILES|EXAMPLES|SEE ALSO" ;;
	*) want="NAME|SYNOPSIS|DESCRIPTION|OPTIONS|FILES|ENVIRONMENT|EXIT STATUS|EXAMPLES|SEE ALSO" ;;
	esac
	echo "$want" | tr '|' '\n' | while read -r sec; do
		grep -q "^\.SH \"*$sec\"*\$" "$page" || fail "$name: no $sec section"
	done
	grep -q '@[a-z]*@' "$page" && fail "$name: unsubstituted $(grep -o '@[a-z]*@' "$page" | head -1)"
	echo "$name: clean"
done

# Every setting of the shipped configuration is described in mfmad.conf(5).
conf5=$mandir/mfmad.conf.5
[ -f "$conf5" ] || fail "no mfmad.conf.5"
awk '
	/^[ \t]*#/ || /^[ \t]*\/\// { next }
	# A group on one line (cuda.providers = { ... };) is one setting.
	/^[ \t]*[a-z_]+[ \t]*=[ \t]*\{.*\};[ \t]*$/ { sub(/^[ \t]*/, ""); split($0, a, /[ \t=]/); print group a[1]; next }
	/^[ \t]*[a-z_]+[ \t]*=[ \t]*\{/ { sub(/^[ \t]*/, ""); split($0, a, /[ \t=]/); group = a[1] "."; next }
	/^[ \t]*\};/ { group = ""; next }
	/^[ \t]*[a-z_]+[ \t]*=/ { sub(/^[ \t]*/, ""); split($0, a, /[ \t=]/); print group a[1] }
' "$src/conf/mfmad.conf" > "$tmp/keys.txt"
[ "$(wc -l < "$tmp/keys.txt")" -ge 20 ] || fail "found only $(wc -l < "$tmp/keys.txt") keys in conf/mfmad.conf"
while read -r key; do
	grep -q "^\.BR* $key\( \|\$\)" "$conf5" || fail "mfmad.conf.5 does not describe $key"
done < "$tmp/keys.txt"
# ... and nothing it describes as a setting is missing from the file.
sed -n '/^\.SH SETTINGS/,/^\.SH FILES/{/^\.TP/{n;s/^\.BR* \([a-z_.]*\).*/\1/p}}' "$conf5" > "$tmp/doc.txt"
while read -r key; do
	grep -qxF "$key" "$tmp/keys.txt" || fail "mfmad.conf.5 describes $key, which conf/mfmad.conf lacks"
done < "$tmp/doc.txt"
echo "mfmad.conf.5: all $(wc -l < "$tmp/keys.txt") settings described"

# Every metric family is listed in mfmad(8).
# A histogram's samples (_bucket, _sum, _count) belong to its family.
grep -o '"mfmad_[a-z0-9_]*["{ ]' "$src/daemon/metrics.c" | sed 's/^"//; s/.$//' |
	sed 's/\(_seconds\|_batch_size\)_\(bucket\|sum\|count\)$/\1/' | sort -u > "$tmp/metrics.txt"
[ -s "$tmp/metrics.txt" ] || fail "no metric names found in daemon/metrics.c"
while read -r m; do
	grep -q "\\(^\\| \\)$m\\( \\|\$\\)" "$mandir/mfmad.8" ||
		fail "mfmad.8 does not list the metric $m"
done < "$tmp/metrics.txt"
echo "mfmad.8: all $(wc -l < "$tmp/metrics.txt") metric families listed"

# Every long option of a program's --help is in its page (as roff writes
# them: \-\-check\-config).
check_options() { # PAGE PROGRAM [COMMAND]
	page=$1
	shift
	"$@" --help > "$tmp/help.txt" 2>&1 || fail "$* --help failed"
	grep -o -- '--[a-z][a-z-]*' "$tmp/help.txt" | sort -u > "$tmp/opts.txt"
	[ -s "$tmp/opts.txt" ] || fail "no options in $1 --help"
	while read -r opt; do
		roff=$(printf '%s' "$opt" | sed 's/-/\\-/g')
		grep -qF -- "$roff" "$page" || fail "$(basename "$page") does not document $opt (from $* --help)"
	done < "$tmp/opts.txt"
	echo "$(basename "$page"): all $(wc -l < "$tmp/opts.txt") options of $* --help documented"
}
skipped=""
if [ -n "$mfmad" ]; then check_options "$mandir/mfmad.8" "$mfmad"; else skipped="mfmad"; fi
if [ -n "$mfmactl" ]; then
	page=$mandir/mfmactl.1
	check_options "$page" "$mfmactl"
	# The commands, from the COMMANDS list of the main help; each has its
	# own subsection and its own options.
	"$mfmactl" --help | sed -n '/^COMMANDS/,/^[A-Z]/{s/^    \([a-z][a-z]*\) .*/\1/p}' > "$tmp/cmds.txt"
	[ "$(wc -l < "$tmp/cmds.txt")" -ge 5 ] || fail "found no command list in mfmactl --help"
	while read -r cmd; do
		grep -q "^\.SS \"mfmactl $cmd[ \"]" "$page" || fail "mfmactl.1 has no subsection for $cmd"
		[ "$cmd" = help ] || check_options "$page" "$mfmactl" "$cmd"
	done < "$tmp/cmds.txt"
else
	skipped="$skipped mfmactl"
fi
if [ -n "$skipped" ]; then
	echo "SKIP: not built yet, options not compared: $skipped"
	exit 77
fi
