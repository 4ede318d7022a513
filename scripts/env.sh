# Sourced by the scripts: settings every mpibert run on this kind of machine needs.
# Open MPI refuses to run as root without these two (CI and containers run as root).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Lets `mpirun -n 3` run on a 2-core machine (the multi-rank tests use 3 ranks).
export OMPI_MCA_rmaps_base_oversubscribe=1
# CMA single-copy needs ptrace permission that containers often lack; plain shared memory works.
export OMPI_MCA_btl_vader_single_copy_mechanism=none
