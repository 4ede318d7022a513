# Sourced by scripts/fuzz.sh and scripts/sanitize.sh: how the sanitizers report. Any report ends
# the process with an error; the suppression files (tests/sanitizers/) give each entry its reason.
sanitizers_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/tests/sanitizers"
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:strict_string_checks=1:check_initialization_order=1:detect_stack_use_after_return=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:suppressions=$sanitizers_dir/ubsan.supp"
export LSAN_OPTIONS="suppressions=$sanitizers_dir/lsan.supp:print_suppressions=0"
export TSAN_OPTIONS="suppressions=$sanitizers_dir/tsan.supp:halt_on_error=1:second_deadlock_stack=1"
