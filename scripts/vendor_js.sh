#!/usr/bin/env bash
# Vendor the dashboard's JavaScript libraries from the npm registry into api/static/vendor/.
# Each library is pinned to an exact version; `npm pack` fetches the published tarball, and we
# copy only the distributed file(s) the pages load and the library's license. Run it again after
# changing a version; the output is committed, so the service never loads code from a CDN.
set -euo pipefail

REPO="$(cd "$(dirname "$0")/.." && pwd)"
DEST="$REPO/api/static/vendor"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

# name@version  then the files inside the package to copy (paths relative to package/)
vendor() {
    local spec="$1"; shift
    local name="${spec%@*}"
    (cd "$WORK" && npm pack --silent "$spec" >/dev/null)
    local tarball
    tarball="$(ls "$WORK"/*.tgz)"
    mkdir -p "$WORK/$name"
    tar -xzf "$tarball" -C "$WORK/$name"
    rm -f "$tarball"
    mkdir -p "$DEST/$name"
    for file in "$@"; do
        cp "$WORK/$name/package/$file" "$DEST/$name/"
    done
    cp "$WORK/$name/package/LICENSE" "$DEST/$name/LICENSE"
    echo "$spec" > "$DEST/$name/VERSION"
    echo "vendored $spec -> api/static/vendor/$name/"
}

vendor uplot@1.6.32 dist/uPlot.iife.min.js dist/uPlot.min.css
