#!/usr/bin/env bash
# Run bench/run.sh from the committed snapshot in .h200/snap (made with `git archive HEAD`, its commit in
# .h200/snap/COMMIT), so helpers' uncommitted edits stay behind; .h200 .whl .gl are linked in.
R=$PWD; S=/tmp/snap; rm -rf $S; cp -r .h200/snap $S
for d in .h200 .whl .gl; do ln -s $R/$d $S/$d; done
export H200_CODE_COMMIT=$(cat .h200/snap/COMMIT 2>/dev/null)
cd $S && exec bash bench/run.sh "$@"
