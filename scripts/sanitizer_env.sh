# Sourced by scripts/fuzz.sh and scripts/sanitize.sh: how the sanitizers report. Any report ends
# the process with an error; the suppression files (tests/sanitizers/) give each entry its reason.
sanitizers_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/tests/sanitizers"
# intercept_tls_get_addr=0: up to LLVM 16 (Debian 12 has clang 14) the runtime's __tls_get_addr
# interceptor takes a dynamic TLS block that happens to start at a certain offset in its page for
# one with a pre-2.25 glibc header and reads two words before it as an address and a length; the
# leak checker's tracer then dies at exit ("Tracer caught signal 11"), on the machines and memory
# layouts where Open MPI's or HDF5's blocks land there (fixed upstream by LLVM's D147459).
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:strict_string_checks=1:check_initialization_order=1:detect_stack_use_after_return=1:intercept_tls_get_addr=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:suppressions=$sanitizers_dir/ubsan.supp"
export LSAN_OPTIONS="suppressions=$sanitizers_dir/lsan.supp:print_suppressions=0"
export TSAN_OPTIONS="suppressions=$sanitizers_dir/tsan.supp:halt_on_error=1:second_deadlock_stack=1"
