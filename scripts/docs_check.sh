#!/usr/bin/env bash
# Docs check (not part of the CI test command): renders every docs/*.svg with headless Chromium
# and checks each screenshot is not blank (more than one colour, and a real share of non-white
# pixels), so a figure that is empty, unparsable or drawn off-canvas is caught.
# Usage: scripts/docs_check.sh [SVG...]   env: CHROMIUM=/usr/bin/chromium OUT=build/docs-check
set -euo pipefail
cd "$(dirname "$0")/.."
CHROMIUM=${CHROMIUM:-/usr/bin/chromium}
OUT=${OUT:-build/docs-check}
mkdir -p "$OUT"
files=("$@")
[ ${#files[@]} -eq 0 ] && files=(docs/*.svg)
fail=0
for svg in "${files[@]}"; do
  # The window: the SVG's own size (width/height attributes), so nothing is cut off.
  w=$(sed -n 's/.*<svg[^>]*width="\([0-9]*\)".*/\1/p' "$svg" | head -1)
  h=$(sed -n 's/.*<svg[^>]*height="\([0-9]*\)".*/\1/p' "$svg" | head -1)
  w=${w:-800}; h=${h:-600}
  png=$OUT/$(basename "$svg" .svg).png
  rm -f "$png"
  timeout 60 "$CHROMIUM" --headless --no-sandbox --disable-gpu --hide-scrollbars --screenshot="$PWD/$png" \
    --window-size="$w,$h" "file://$PWD/$svg" >/dev/null 2>&1 || true
  if [ ! -s "$png" ]; then
    echo "FAIL $svg: no screenshot"; fail=1; continue
  fi
  # Colours and the share of non-white pixels, from the PNG (python3's zlib reads it; no PIL).
  read -r colours ink < <(python3 - "$png" <<'PY'
import struct, sys, zlib
d = open(sys.argv[1], "rb").read()
pos, idat, w = 8, b"", 0
while pos < len(d):
    n, t = struct.unpack(">I4s", d[pos:pos + 8]); body = d[pos + 8:pos + 8 + n]; pos += 12 + n
    if t == b"IHDR": w, h, depth, ctype = struct.unpack(">IIBB", body[:10])
    if t == b"IDAT": idat += body
bpp = {2: 3, 6: 4}[ctype]
raw, stride, prev, rows = zlib.decompress(idat), w * bpp, bytearray(w * bpp), []
for y in range(h):
    f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
    for i in range(stride):
        a = line[i - bpp] if i >= bpp else 0; b = prev[i]; c = prev[i - bpp] if i >= bpp else 0
        if f == 1: line[i] = (line[i] + a) & 255
        elif f == 2: line[i] = (line[i] + b) & 255
        elif f == 3: line[i] = (line[i] + (a + b) // 2) & 255
        elif f == 4:
            p = a + b - c; pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
    rows.append(bytes(line)); prev = line
px = [r[i:i + 3] for r in rows for i in range(0, stride, bpp)]
print(len(set(px)), sum(p != b"\xff\xff\xff" for p in px) / len(px))
PY
)
  if [ "$colours" -lt 3 ] || python3 -c "import sys; sys.exit(0 if float('$ink') < 0.005 else 1)"; then
    echo "FAIL $svg: blank render ($colours colours, ink $ink) -> $png"; fail=1
  else
    echo "ok   $svg: ${w}x${h}, $colours colours, $(python3 -c "print(f'{100*$ink:.1f}')")% ink -> $png"
  fi
done
exit $fail
