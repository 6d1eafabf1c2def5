#!/usr/bin/env bash
# Extraction speed: a 512 MiB package (made by Info-ZIP `zip`) unpacked by `courier package install`
# against `bsdtar -xf` and `unzip` in the same run. Prints the ratio to bsdtar (goal <= 1.1) and
# the peak RSS of each (GNU time).
#
#   Benchmarks/packages.sh            # builds courier in release mode if needed
#   COURIER_BIN=path/to/courier Benchmarks/packages.sh
#   BENCH_OUT=/dev/shm/courier-bench Benchmarks/packages.sh   # unpack to tmpfs: CPU, not the disk
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/opt/swift/usr/bin:$PATH"
for tool in hyperfine bsdtar unzip zip python3; do
  command -v "$tool" >/dev/null || { echo "packages.sh: $tool is missing" >&2; exit 1; }
done
[ -x /usr/bin/time ] || { echo "packages.sh: installing GNU time" >&2; apt-get install -y -q time >/dev/null; }

courier=${COURIER_BIN:-.build/release/courier}
if [ -z "${COURIER_BIN:-}" ]; then
  swift build -c release --static-swift-stdlib --product courier >&2
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
    # seq is cut off by head (SIGPIPE); under pipefail that status must not end the script.
    { seq $((i * 1000000)) $((i * 1000000 + 2000000)) || true; } | head -c $((8 << 20)) > "$src/Contents/text/log$i.txt"
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
if [ -n "${BENCH_OUT:-}" ]; then
  # Read the package from the same place it unpacks to, so a slow disk does not dominate.
  mkdir -p "$BENCH_OUT" && cp "$package" "$BENCH_OUT/package.zip" && package=$BENCH_OUT/package.zip
fi

out=${BENCH_OUT:-$work}
mkdir -p "$out"
nosync=$work/nosync.json
echo '{"placement": {"syncBeforeRename": false}}' > "$nosync"
install="$courier package install $package --placement cache --product $product --storage $out/storage"
hyperfine --warmup 1 --runs "${RUNS:-3}" --export-json "$work/results.json" \
  --prepare "rm -rf $out/out $out/storage; mkdir -p $out/out; sync" \
  -n "bsdtar -xf" "bsdtar -xf $package -C $out/out" \
  -n "unzip" "unzip -q -o $package -d $out/out" \
  -n "courier install (no sync)" "$install --config $nosync" \
  -n "courier install (syncfs before rename)" "$install"

echo
echo "peak RSS (GNU time, one run each):"
for name in bsdtar unzip courier; do
  rm -rf "$out/out" "$out/storage"; mkdir -p "$out/out"
  case $name in
    bsdtar) cmd="bsdtar -xf $package -C $out/out" ;;
    unzip) cmd="unzip -q -o $package -d $out/out" ;;
    courier) cmd="$install --config $nosync" ;;
  esac
  /usr/bin/time -f "  $name: %M KiB" $cmd 2>&1 >/dev/null | tail -1
done
rm -rf "$out/out" "$out/storage"
[ -z "${BENCH_OUT:-}" ] || rm -f "$BENCH_OUT/package.zip"

python3 - "$work/results.json" <<'PY'
import json, sys
results = {r["command"]: r for r in json.load(open(sys.argv[1]))["results"]}
base = results["bsdtar -xf"]
cpu = lambda r: r["user"] + r["system"]
print()
print(f"  {'command':40s} {'wall (mean ± sd)':>18s}  ratio   {'cpu (user+sys)':>14s}  ratio")
for name, r in results.items():
    print(f"  {name:40s} {r['mean']:8.3f} ± {r['stddev']:6.3f} s  {r['mean'] / base['mean']:5.2f}   {cpu(r):12.3f} s  {cpu(r) / cpu(base):5.2f}")
print("goal: courier install (no sync) / bsdtar <= 1.1 (wall); on a loaded machine the cpu ratio is steadier")
PY
