// The Open MPI parameters mpibert sets for every launch (btl_tcp_links, mpi_yield_when_idle:
// docs/measurements.md), as OMPI_MCA_* variables before MPI_Init, and only where nothing else
// set them: neither the environment (mpirun --mca, an exported variable, an AMCA file mpirun read)
// nor one of Open MPI's own parameter files (a site's openmpi-mca-params.conf, a user's
// ~/.openmpi/mca-params.conf, or those OMPI_MCA_mca_base_param_files names), which the variable
// would override.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace mpibert {

// The TCP connections Open MPI opens between two ranks (btl_tcp_links) where nothing else says.
inline constexpr const char* kOpenMpiTcpLinks = "4";
// Whether Open MPI's progress loop yields the core while it waits for data (mpi_yield_when_idle)
// where nothing else says.
inline constexpr const char* kOpenMpiYieldWhenIdle = "1";

struct OpenMpiSetting {
  std::string name;    // "btl_tcp_links"
  std::string value;   // as it takes effect
  std::string source;  // "the environment", a parameter file's path, or "mpibert's default"
};

// The parameter files Open MPI reads, in its order: OMPI_MCA_mca_base_param_files's list when set,
// else ~/.openmpi/mca-params.conf and the installation's openmpi-mca-params.conf (its sysconfdir:
// OPAL_SYSCONFDIR, else OPAL_PREFIX/etc, else the one the build found with ompi_info).
std::vector<std::string> open_mpi_param_files();

// `name`'s value in a parameter file ("name = value" lines, # comments), if it sets it.
std::optional<std::string> read_open_mpi_param_file(const std::string& path, const std::string& name);

// Sets mpibert's defaults where nothing else does (MpiSession calls it before MPI_Init) and returns
// where each parameter's value comes from; open_mpi_settings() gives the same afterwards.
std::vector<OpenMpiSetting> apply_open_mpi_defaults();
const std::vector<OpenMpiSetting>& open_mpi_settings();
// "btl_tcp_links=4 (mpibert's default), mpi_yield_when_idle=0 (/etc/openmpi/openmpi-mca-params.conf)".
std::string describe_open_mpi_settings();

}  // namespace mpibert
