#include "mpibert/runtime/open_mpi_settings.hpp"

#include <cstdlib>
#include <fstream>

#ifndef MPIBERT_OPEN_MPI_SYSCONFDIR
#define MPIBERT_OPEN_MPI_SYSCONFDIR "/etc/openmpi"
#endif

namespace mpibert {
namespace {

std::string trimmed(const std::string& text) {
  const size_t begin = text.find_first_not_of(" \t\r");
  if (begin == std::string::npos) return "";
  return text.substr(begin, text.find_last_not_of(" \t\r") - begin + 1);
}

std::string environment(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

std::string sysconfdir() {
  if (!environment("OPAL_SYSCONFDIR").empty()) return environment("OPAL_SYSCONFDIR");
  if (!environment("OPAL_PREFIX").empty()) return environment("OPAL_PREFIX") + "/etc";
  return MPIBERT_OPEN_MPI_SYSCONFDIR;
}

std::vector<OpenMpiSetting>& settings() {
  static std::vector<OpenMpiSetting> applied;
  return applied;
}

}  // namespace

std::vector<std::string> open_mpi_param_files() {
  const std::string listed = environment("OMPI_MCA_mca_base_param_files");
  if (listed.empty()) {
    std::vector<std::string> files;
    if (!environment("HOME").empty()) files.push_back(environment("HOME") + "/.openmpi/mca-params.conf");
    files.push_back(sysconfdir() + "/openmpi-mca-params.conf");
    return files;
  }
  std::vector<std::string> files;  // Open MPI separates them by ',' (older releases ':')
  std::string file;
  for (const char c : listed + ",") {
    if (c == ',' || c == ':') {
      if (!trimmed(file).empty()) files.push_back(trimmed(file));
      file.clear();
    } else {
      file += c;
    }
  }
  return files;
}

std::optional<std::string> read_open_mpi_param_file(const std::string& path, const std::string& name) {
  std::ifstream in(path);
  std::optional<std::string> value;
  for (std::string line; std::getline(in, line);) {
    line = trimmed(line.substr(0, line.find('#')));
    const size_t equals = line.find('=');
    if (equals == std::string::npos || trimmed(line.substr(0, equals)) != name) continue;
    value = trimmed(line.substr(equals + 1));  // the last line that sets it wins, as in Open MPI
  }
  return value;
}

std::vector<OpenMpiSetting> apply_open_mpi_defaults() {
  static const std::pair<const char*, const char*> defaults[] = {{"btl_tcp_links", kOpenMpiTcpLinks},
                                                                 {"mpi_yield_when_idle", kOpenMpiYieldWhenIdle}};
  std::vector<OpenMpiSetting>& applied = settings();
  applied.clear();
  const std::vector<std::string> files = open_mpi_param_files();
  for (const auto& [name, value] : defaults) {
    const std::string variable = std::string("OMPI_MCA_") + name;
    OpenMpiSetting setting{name, environment(variable.c_str()), "the environment"};
    for (auto file = files.begin(); setting.value.empty() && file != files.end(); ++file)
      if (const auto in_file = read_open_mpi_param_file(*file, name)) setting = {name, *in_file, *file};
    if (setting.value.empty()) {
      setenv(variable.c_str(), value, /*overwrite=*/0);
      setting = {name, value, "mpibert's default"};
    }
    applied.push_back(setting);
  }
  return applied;
}

const std::vector<OpenMpiSetting>& open_mpi_settings() { return settings(); }

std::string describe_open_mpi_settings() {
  std::string text;
  for (const OpenMpiSetting& setting : settings())
    text += (text.empty() ? "" : ", ") + setting.name + "=" + setting.value + " (" + setting.source + ")";
  return text;
}

}  // namespace mpibert
