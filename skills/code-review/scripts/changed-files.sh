#!/bin/sh
# Lists the files a change touches, with lines added and removed, to plan a review.
#
# Usage: changed-files.sh [BASE | --staged]
#   BASE      compare the working tree with this commit, branch or tag
#   --staged  only what is staged for the next commit
#   (none)    compare with the merge base of origin/main, origin/master, main or master;
#             on that branch itself this shows the uncommitted changes
set -eu

if ! git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    echo "changed-files.sh: not inside a git repository" >&2
    exit 2
fi

case "${1:-}" in
--staged)
    label="staged changes"
    set -- --cached
    ;;
"")
    base=""
    for ref in origin/main origin/master main master; do
        if git rev-parse --verify --quiet "$ref^{commit}" >/dev/null; then
            base=$(git merge-base HEAD "$ref" 2>/dev/null || true)
            [ -n "$base" ] && break
        fi
    done
    if [ -z "$base" ]; then
        base=HEAD
    fi
    label="changes since $(git rev-parse --short "$base")"
    set -- "$base"
    ;;
*)
    label="changes since $1"
    ;;
esac

echo "# $label: added removed path ('-' for binary files)"
git diff --numstat "$@"
if [ "$1" != "--cached" ]; then
    untracked=$(git ls-files --others --exclude-standard)
    if [ -n "$untracked" ]; then
        echo "# untracked files (new, not yet added to git):"
        echo "$untracked"
    fi
fi
