#!/usr/bin/env bash
# `make test` runs this first: the browser test (tests/integration/test_browser.py) drives
# Debian's Chromium with Playwright (Playwright's own browser download is not used). If
# $DATAFLOW_CHROMIUM (default /usr/bin/chromium) is missing it is installed with apt-get when
# that is possible (root, or passwordless sudo), as .ci/run does; otherwise this says what to run.
set -euo pipefail
chromium="${DATAFLOW_CHROMIUM:-/usr/bin/chromium}"
[ -x "$chromium" ] && exit 0
if [ "$chromium" = /usr/bin/chromium ] && command -v apt-get >/dev/null 2>&1; then
    sudo=""
    if [ "$(id -u)" != 0 ]; then
        if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then sudo="sudo"; else sudo=""; fi
    fi
    if [ "$(id -u)" = 0 ] || [ -n "$sudo" ]; then
        echo "make test: installing Debian's chromium for the browser test (apt-get install chromium) ..." >&2
        $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium >/dev/null
        [ -x "$chromium" ] && exit 0
    fi
fi
echo "make test: the browser test needs Chromium at $chromium: install it (Debian/Ubuntu: sudo apt-get install chromium)," \
     "or point DATAFLOW_CHROMIUM at a Chromium binary" >&2
exit 1
