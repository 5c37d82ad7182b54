#!/usr/bin/env bash
# VictoriaMetrics (single-node server) from Debian trixie, for the OTLP metrics tests:
# it takes OTLP/HTTP metrics in and answers PromQL (bookworm's 1.79 predates OTLP
# ingestion). Private apt state (the system's apt configuration is untouched); nothing is
# installed with dpkg, the .deb is only extracted. Prints the binary's path.
# usage: victoriametrics.sh [WORKDIR]   (default ~/.cache/victoriametrics; reused when present)
set -euo pipefail
WORK=${1:-$HOME/.cache/victoriametrics}
BIN="$WORK/root/usr/bin/victoria-metrics"
if [ -x "$BIN" ]; then echo "$BIN"; exit 0; fi
mkdir -p "$WORK"/apt/{lists/partial,cache/archives/partial,parts} "$WORK"/debs "$WORK"/root
cat > "$WORK/apt/parts/trixie.sources" <<'SRC'
Types: deb
URIs: http://deb.debian.org/debian
Suites: trixie
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
O=(-o Dir::Etc::SourceList=/dev/null -o Dir::Etc::SourceParts="$WORK/apt/parts"
   -o Dir::State::Lists="$WORK/apt/lists" -o Dir::Cache="$WORK/apt/cache")
apt-get "${O[@]}" update -qq 2>&1 | grep -v unsandboxed >&2 || true
(cd "$WORK/debs" && apt-get "${O[@]}" download victoria-metrics 2>&1 | grep -v unsandboxed >&2 || true)
deb=$(ls "$WORK"/debs/victoria-metrics_*.deb | head -1)
dpkg-deb -x "$deb" "$WORK/root"
[ -x "$BIN" ] || { echo "victoriametrics.sh: no $BIN in $deb" >&2; exit 1; }
echo "$BIN"
