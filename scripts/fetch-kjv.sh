#!/usr/bin/env bash
# Rebuilds data/kjv/kjv-pentateuch.txt (data/README.md): the King James
# Version text from the Debian packages bible-kjv-text (the compressed text)
# and bible-kjv (the `bible` reader that decompresses it), Genesis 1:1 ..
# Deuteronomy 34:12, one chapter heading line ("Genesis 1") and then one verse
# per line without its number.
#
#   scripts/fetch-kjv.sh [OUT]       (default: data/kjv/kjv-pentateuch.txt)
#   FULL=1 scripts/fetch-kjv.sh OUT  (the whole Bible, Genesis .. Revelation, 4.3 MB)
#
# Needs apt-get (Debian/Ubuntu; downloads the .deb files only, installs
# nothing) and dpkg-deb. Checked with bible-kjv-text 4.38 and bible-kjv 4.38.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-data/kjv/kjv-pentateuch.txt}"
range="gen1:1-deu34:12"
[[ "${FULL:-0}" == 1 ]] && range="gen1:1-rev22:21"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && apt-get download bible-kjv-text bible-kjv >/dev/null 2>&1) || {
  echo "fetch-kjv: apt-get download bible-kjv-text bible-kjv failed" >&2
  exit 1
}
for d in "$tmp"/*.deb; do dpkg-deb -x "$d" "$tmp/x"; done

# Pretty-printed output: "Genesis 1" heading lines, verses as "  N text"
# wrapped at 80 columns (continuation lines have no number). Unwrap and drop
# the verse numbers.
"$tmp/x/usr/bin/bible" -p "$tmp/x/usr/lib" -l 100000 "$range" |
  python3 -c '
import re, sys
out, cur = [], None
for line in sys.stdin.read().splitlines():
    if not line.strip():
        continue
    m = re.match(r"^  (\d+) (.*)$", line)
    if m:
        if cur is not None: out.append(cur)
        cur = m.group(2)
    elif line.startswith(" "):
        cur = (cur + " " + line.strip()) if cur is not None else line.strip()
    elif cur is not None and not re.match(r"^(\d )?[A-Z][A-Za-z ]* \d+$", line):
        cur += " " + line.strip()          # a wrapped continuation line
    else:
        if cur is not None: out.append(cur); cur = None
        out.append(line.strip())           # chapter heading
if cur is not None: out.append(cur)
sys.stdout.write("\n".join(out) + "\n")
' >"$out"
echo "fetch-kjv: wrote $out ($(wc -c <"$out") bytes, $(wc -l <"$out") lines)"
sha256sum "$out"
