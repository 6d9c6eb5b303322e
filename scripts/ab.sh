#!/usr/bin/env bash
# A/B of a kernel change in one device call: the same measurement on the checkout (A), then on the
# checkout with a candidate's files laid over it (B), on the same GPU minutes apart (two calls land on
# different machines or clocks; results of one call compare, across calls they may not).
#
#   bash scripts/ab.sh CANDIDATE_DIR COMMAND...
#
# CANDIDATE_DIR holds the candidate's changed files at their paths in the repository (e.g.
# ab/csrc/softmax/cluster.cu); make it with
#   git diff --name-only main wip/x | while read f; do mkdir -p ab/$(dirname $f); git show wip/x:$f >ab/$f; done
# (ab/ is left untracked and not ignored, so the device tool carries it). COMMAND runs from the
# repository root after each build, with AB=A or AB=B in its environment; its output goes to stdout
# with each line prefixed "A " or "B ". Example (bfloat16 cluster shapes from N = 8192 up):
#   bash scripts/ab.sh ab python scripts/tune/tune_cluster.py --dtype bfloat16 --shapes packed --min-n 8192
# The checkout's files are restored at the end (from a copy taken first, touched so that the next
# build.sh rebuilds them): a later command in the same call runs on A again once built.
set -uo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { echo "usage: bash scripts/ab.sh CANDIDATE_DIR COMMAND..." >&2; exit 2; }
cand=$1; shift
[ -d "$cand" ] || { echo "ab.sh: no candidate folder $cand" >&2; exit 2; }
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
mapfile -t files < <(cd "$cand" && find . -type f | sed 's|^\./||' | sort)
[ ${#files[@]} -gt 0 ] || { echo "ab.sh: $cand is empty" >&2; exit 2; }
keep=$(mktemp -d)
for f in "${files[@]}"; do
  [ -e "$f" ] || { echo "ab.sh: $f is not in the checkout (a candidate changes files, it adds none)" >&2; exit 2; }
  mkdir -p "$keep/$(dirname "$f")" && cp -p "$f" "$keep/$f"
done
restore() { for f in "${files[@]}"; do cp "$keep/$f" "$f" && touch "$f"; done; }  # touched: a later build sees them
trap restore EXIT

status=0
run() {  # run LABEL: build, then the command, its lines prefixed
  echo "== $1: $(date -u +%T) build"
  bash build.sh >"build/ab_build_$1.log" 2>&1 || { echo "$1: build failed"; tail -20 "build/ab_build_$1.log"; return 1; }
  echo "== $1: $(date -u +%T) ${*:2}"
  AB=$1 "${@:2}" 2>&1 | sed -u "s/^/$1 /"
  [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "$1: the command failed"; status=1; }
}
mkdir -p build
echo "== candidate files: ${files[*]}"
run A "$@" || exit 1
for f in "${files[@]}"; do cp "$cand/$f" "$f"; touch "$f"; done
run B "$@" || status=1
exit $status
