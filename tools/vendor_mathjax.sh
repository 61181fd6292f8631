#!/usr/bin/env bash
# Vendor MathJax 3 into _static/mathjax so that the site typesets math offline.
#
#   bash tools/vendor_mathjax.sh            (needs npm and the npm registry)
#
# The files it writes are committed, so building the book needs neither npm
# nor the network. It keeps only what the site loads: the TeX-input/CHTML-output
# component, its woff-v2 fonts, and the TeX extensions that component may
# autoload on demand. MathJax is Apache-2.0; its LICENSE is kept beside it.
set -euo pipefail
VERSION="${MATHJAX_VERSION:-3.2.2}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DEST="$ROOT/_static/mathjax"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
(cd "$WORK" && npm pack --silent "mathjax@$VERSION" >/dev/null && tar xzf "mathjax-$VERSION.tgz")
SRC="$WORK/package"
rm -rf "$DEST"
mkdir -p "$DEST/output/chtml/fonts" "$DEST/input/tex"
cp "$SRC/es5/tex-chtml.js" "$DEST/"
cp -r "$SRC/es5/output/chtml/fonts/woff-v2" "$DEST/output/chtml/fonts/"
cp -r "$SRC/es5/input/tex/extensions" "$DEST/input/tex/"
cp "$SRC/LICENSE" "$DEST/LICENSE"
cat > "$DEST/VENDORED.txt" <<TXT
MathJax $VERSION (Apache-2.0, see LICENSE), vendored from the npm package
\`mathjax@$VERSION\` by \`bash tools/vendor_mathjax.sh\`: es5/tex-chtml.js, its
woff-v2 fonts and the TeX extensions it may autoload. \`_config.yml\` points
Sphinx's \`mathjax_path\` here so that the built site needs no CDN.
TXT
du -sh "$DEST"
