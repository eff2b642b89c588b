#!/bin/sh
# The checked-in corpus holds what the seed generator writes (and may hold
# more: inputs that once found a bug).
#   check_seeds.sh GENERATOR CORPUS WORKDIR
set -eu
[ $# -eq 3 ] || { echo "usage: $0 GENERATOR CORPUS WORKDIR" >&2; exit 2; }
gen=$1 corpus=$2 work=$3
rm -rf "$work"
mkdir -p "$work"
"$gen" "$work"
status=0
for f in "$work"/*/*; do
    rel=${f#"$work"/}
    if ! cmp -s "$f" "$corpus/$rel"; then
        echo "corpus/$rel differs from what the generator writes" >&2
        status=1
    fi
done
[ $status -eq 0 ] && echo "$(ls "$work"/*/* | wc -l) seeds match"
exit $status
