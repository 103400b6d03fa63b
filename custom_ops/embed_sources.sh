#!/bin/sh
# Writes (to stdout) a C++ file that returns the kernel sources named in LIST as one raw string literal:
#
#   embed_sources.sh LIST NAMESPACE FUNCTION DELIMITER FILE_MARKER
#
# Each file's text follows a line "FILE_MARKER<path>". Paths in LIST are relative to LIST's folder; '#' starts a
# comment. The Bazel build runs this (custom_ops/BUILD); CMakeLists.txt writes the same bytes with file(READ) at
# configure time, so the two builds embed identical sources.
set -eu
list=$1 ns=$2 fn=$3 delim=$4 marker=$5
dir=$(dirname "$list")
printf 'namespace %s {\nconst char* %s() {\n  return R"%s(' "$ns" "$fn" "$delim"
sed -e 's/#.*//' -e 's/[[:space:]]*$//' -e 's/^[[:space:]]*//' "$list" | while IFS= read -r f; do
  [ -n "$f" ] || continue
  if [ ! -f "$dir/$f" ]; then
    echo "embed_sources.sh: $list names $f, which does not exist" >&2
    exit 1
  fi
  printf '%s%s\n' "$marker" "$f"
  cat "$dir/$f"
  printf '\n'
done
printf ')%s";\n}\n}  // namespace %s\n' "$delim" "$ns"
