#!/bin/sh
# The Debian mirrors this machine's apt uses, best first, one URI a line: every binary
# ("deb") source with the main component, in the order apt reads them, each once; the
# security archive left out (it carries only SUITE-security). apt itself reads the sources
# (/etc/apt/sources.list and sources.list.d's .list and deb822 .sources alike, options,
# Enabled: no and comments included), so nothing here parses them again. Which of them is
# really Debian's archive is left to apt-get update against Debian's keyring
# (lab/second-uml.sh tries them in turn).
#
# Usage: debian-mirrors.sh (APT_CONFIG may point apt at other sources, as the tests do).
# Exit 0 with at least one line, or 3 saying there is none.
set -eu
mirrors=$(apt-get indextargets --no-release-info --format '$(TARGET_OF) $(REPO_URI) $(RELEASE) $(COMPONENT)' |
    awk '$1 == "deb" && $4 == "main" && $3 !~ /-security$/ && !seen[$2]++ { print $2 }')
if [ -z "$mirrors" ]; then
    echo "debian-mirrors.sh: apt's sources name no Debian mirror (no \"deb URI SUITE main\" entry)" >&2
    exit 3
fi
printf '%s\n' "$mirrors"
