#!/usr/bin/env bash
# Extraction speed: a 512 MiB package (made by Info-ZIP `zip`) unpacked by `courier package install`
# against `bsdtar -xf` and `unzip` in the same run. Prints the ratio to bsdtar (goal <= 1.1) and
# the peak RSS of each (GNU time).
#
#   Benchmarks/packages.sh            # builds courier in release mode if needed
#   COURIER_BIN=path/to/courier Benchmarks/packages.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/opt/swift/usr/bin:$PATH"
for tool in hyperfine bsdtar unzip zip python3; do
  command -v "$tool" >/dev/null || { echo "packages.sh: $tool is missing" >&2; exit 1; }
done
[ -x /usr/bin/time ] || { echo "packages.sh: installing GNU time" >&2; apt-get install -y -q time >/dev/null; }

courier=${COURIER_BIN:-.build/release/courier}
if [ -z "${COURIER_BIN:-}" ]; then
  swift build -c release --product courier >&2
fi
work=$(pwd)/Benchmarks/.work/packages
mkdir -p "$work"
package=$work/package-512m.zip
product=com.example.benchmark

if [ ! -f "$package" ]; then
  echo "packages.sh: making a 512 MiB package (half incompressible media, half text)" >&2
  src=$work/src
  rm -rf "$src" && mkdir -p "$src/Contents/media" "$src/Contents/text"
  for i in $(seq 1 32); do
    dd if=/dev/urandom of="$src/Contents/media/blob$i.bin" bs=1M count=8 status=none
    seq $((i * 1000000)) $((i * 1000000 + 2000000)) | head -c $((8 << 20)) > "$src/Contents/text/log$i.txt"
  done
  cat > "$src/ContentInfo.plist" <<PLIST
<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
<plist version="1.0">
<dict>
	<key>ContentVersion</key>
	<string>1.0</string>
	<key>IAPProductIdentifier</key>
	<string>$product</string>
</dict>
</plist>
PLIST
  (cd "$src" && zip -q -r "$package" ContentInfo.plist Contents)
  rm -rf "$src"
fi
ls -l "$package" >&2

nosync=$work/nosync.json
echo '{"placement": {"syncBeforeRename": false}}' > "$nosync"
install="$courier package install $package --placement cache --product $product --storage $work/storage"
hyperfine --warmup 1 --runs 5 --export-json "$work/results.json" \
  --prepare "rm -rf $work/out $work/storage; mkdir -p $work/out; sync" \
  -n "bsdtar -xf" "bsdtar -xf $package -C $work/out" \
  -n "unzip" "unzip -q -o $package -d $work/out" \
  -n "courier install (no sync)" "$install --config $nosync" \
  -n "courier install (syncfs before rename)" "$install"

echo
echo "peak RSS (GNU time, one run each):"
for name in bsdtar unzip courier; do
  rm -rf "$work/out" "$work/storage"; mkdir -p "$work/out"
  case $name in
    bsdtar) cmd="bsdtar -xf $package -C $work/out" ;;
    unzip) cmd="unzip -q -o $package -d $work/out" ;;
    courier) cmd="$install --config $nosync" ;;
  esac
  /usr/bin/time -f "  $name: %M KiB" $cmd 2>&1 >/dev/null | tail -1
done
rm -rf "$work/out" "$work/storage"

python3 - "$work/results.json" <<'PY'
import json, sys
results = {r["command"]: r for r in json.load(open(sys.argv[1]))["results"]}
base = results["bsdtar -xf"]["mean"]
print()
for name, r in results.items():
    print(f"  {name:40s} {r['mean']:.3f} s ± {r['stddev']:.3f}   ratio to bsdtar {r['mean'] / base:.2f}")
print("goal: courier install (no sync) / bsdtar <= 1.1")
PY
