#!/usr/bin/env bash
# What a device call sends is the working tree (tracked and untracked-not-ignored files), at most
# 64 MiB with the carried folder. docs/bench (the raw outputs of every measurement, ~50 MiB) is
# needed by nothing the check runs, so for the calls it leaves the index (its files stay on disk):
#   scripts/device/travel.sh light   # before bundle.sh and the device calls
#   scripts/device/travel.sh full    # after them: the index as it was (commit nothing in between)
#   scripts/device/travel.sh size    # the bytes a call would send beside its carried folder
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .git/info; touch .git/info/exclude
case "${1:-}" in
  light)
    if ! git diff --cached --quiet; then echo "error: the index has staged changes; commit or unstage them first" >&2; exit 2; fi
    git rm -r -q --cached docs/bench
    grep -qx '/docs/bench/' .git/info/exclude || echo '/docs/bench/' >> .git/info/exclude ;;
  full)
    git reset -q -- docs/bench
    sed -i '\#^/docs/bench/$#d' .git/info/exclude ;;
  size) ;;
  *) echo "usage: travel.sh light | full | size" >&2; exit 2 ;;
esac
git ls-files -z --cached --others --exclude-standard | xargs -0 stat -c %s 2>/dev/null \
  | awk '{s+=$1} END {printf "the working tree sends %.1f MiB\n", s/1048576}'
