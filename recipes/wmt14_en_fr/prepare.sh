#!/usr/bin/env bash
# Download (or --local DIR), normalise and binarize WMT14 with a joint vocabulary. See README.md.
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/config.sh"
source "$HERE/../lib/wmt14.sh"
prepare_main "$@"
