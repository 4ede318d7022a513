#!/usr/bin/env bash
# The C++ sources follow .clang-format: lists the files clang-format would change, exit 1 if any
# (`clang-format -i FILE` formats one).
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files 'src/*.cpp' 'src/*.hpp' 'include/*.hpp' 'tests/*.cpp' 'tests/*.hpp' 'bench/*.cpp' \
                                  'data_prep/*.cpp')
unformatted=()
for file in "${files[@]}"; do
  clang-format --dry-run --Werror "$file" 2>/dev/null || unformatted+=("$file")
done
echo "check_format: ${#files[@]} files, ${#unformatted[@]} not formatted${unformatted:+: ${unformatted[*]}}"
[ ${#unformatted[@]} -eq 0 ]
