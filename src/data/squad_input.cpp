#include "mpibert/data/squad_input.hpp"

#include <glob.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "mpibert/core/error.hpp"
#include "mpibert/core/io.hpp"
#include "mpibert/core/json_text.hpp"
#include "mpibert/data/squad_json_records.hpp"
#include "mpibert/data/squad_parquet.hpp"

namespace fs = std::filesystem;

namespace mpibert {
namespace {

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool is_data_file(const fs::path& path) {
  std::string name = path.filename().string();
  if (ends_with(name, ".gz")) name.resize(name.size() - 3);
  for (const char* extension : {".parquet", ".json", ".jsonl", ".ndjson"})
    if (ends_with(name, extension)) return true;
  return false;
}

// The Hub's name of a split's files: train-00000-of-00001.parquet, validation-...
std::string hub_split(const std::string& split) { return split == "eval" ? "validation" : "train"; }

bool is_split_file(const fs::path& path, const std::string& hub_name) {
  const std::string name = path.filename().string();
  return name.rfind(hub_name + "-", 0) == 0 || name.rfind(hub_name + ".", 0) == 0;
}

std::vector<std::string> sorted_files(const fs::path& dir, bool (*wanted)(const fs::path&)) {
  std::vector<std::string> files;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(dir, error))
    if (entry.is_regular_file() && wanted(entry.path())) files.push_back(entry.path().string());
  std::sort(files.begin(), files.end());
  return files;
}

// A folder's data files; where some are the Hub's split files, those of `split` alone.
std::vector<std::string> folder_files(const fs::path& dir, const std::string& split) {
  std::vector<std::string> files = sorted_files(dir, is_data_file);
  const bool hub_layout = std::any_of(files.begin(), files.end(), [](const std::string& file) {
    return is_split_file(file, "train") || is_split_file(file, "validation") || is_split_file(file, "test");
  });
  if (hub_layout) {
    const std::string name = hub_split(split);
    files.erase(std::remove_if(files.begin(), files.end(), [&](const std::string& file) { return !is_split_file(file, name); }),
                files.end());
    if (files.empty())
      throw InputError(describe(dir.string(), "",
                                "holds the Hub's split files but none of '" + name + "' (--split " + split + ")"));
  }
  if (files.empty()) throw InputError(describe(dir.string(), "", "holds no .parquet, .json, .jsonl or .ndjson file (maybe .gz)"));
  return files;
}

std::vector<std::string> glob_files(const std::string& pattern) {
  glob_t matches{};
  const int status = ::glob(pattern.c_str(), 0, nullptr, &matches);
  std::vector<std::string> files;
  for (size_t i = 0; status == 0 && i < matches.gl_pathc; ++i)
    if (fs::is_regular_file(matches.gl_pathv[i])) files.push_back(matches.gl_pathv[i]);
  ::globfree(&matches);
  if (files.empty()) throw InputError(describe(pattern, "", "no file matches this pattern"));
  std::sort(files.begin(), files.end());
  return files;
}

std::string environment(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

// The snapshot of a cached repository that refs/main names, else its only one.
fs::path snapshot_of(const fs::path& repository, const std::string& name, const std::string& looked) {
  const fs::path snapshots = repository / "snapshots";
  if (!fs::is_directory(snapshots))
    throw InputError(describe("--dataset-name " + name, "",
                              "not in the HF cache: no " + snapshots.string() + " (" + looked +
                                  "); download it first: huggingface-cli download " + name + " --repo-type dataset"));
  std::error_code error;
  if (fs::exists(repository / "refs" / "main", error)) {
    std::string commit = read_file(repository / "refs" / "main");
    commit.erase(commit.find_last_not_of(" \r\n") + 1);
    if (fs::is_directory(snapshots / commit)) return snapshots / commit;
  }
  std::vector<fs::path> found;
  for (const auto& entry : fs::directory_iterator(snapshots, error))
    if (entry.is_directory()) found.push_back(entry.path());
  if (found.size() != 1)
    throw InputError(describe(snapshots.string(), "",
                              std::to_string(found.size()) + " snapshots and no refs/main naming one of them: download " + name +
                                  " again"));
  return found[0];
}

// A folder's Parquet files of a split: SPLIT-*.parquet, or SPLIT/*.parquet.
std::vector<std::string> split_parquet_files(const fs::path& folder, const std::string& hub_name) {
  std::vector<std::string> files = sorted_files(folder, [](const fs::path& path) { return path.extension() == ".parquet"; });
  files.erase(std::remove_if(files.begin(), files.end(), [&](const std::string& file) { return !is_split_file(file, hub_name); }),
              files.end());
  if (files.empty() && fs::is_directory(folder / hub_name))
    files = sorted_files(folder / hub_name, [](const fs::path& path) { return path.extension() == ".parquet"; });
  return files;
}

std::vector<std::string> hub_dataset_files(const SquadSource& source, std::string* origin) {
  const std::string cache = hf_hub_cache_dir();
  const std::string looked = "the HF cache is " + cache + ": $HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub";
  std::string folder_name = "datasets--" + source.dataset_name;
  for (size_t at = folder_name.find('/'); at != std::string::npos; at = folder_name.find('/', at + 2))
    folder_name.replace(at, 1, "--");
  const fs::path snapshot = snapshot_of(fs::path(cache) / folder_name, source.dataset_name, looked);
  const std::string split = hub_split(source.split);
  std::vector<fs::path> configs;
  if (!source.dataset_config.empty()) {
    configs.push_back(snapshot / source.dataset_config);
  } else {
    std::error_code error;
    for (const auto& entry : fs::directory_iterator(snapshot, error))
      if (entry.is_directory() && !split_parquet_files(entry.path(), split).empty()) configs.push_back(entry.path());
    std::sort(configs.begin(), configs.end());
    if (configs.size() > 1) {
      std::string names;
      for (const auto& config : configs) names += (names.empty() ? "" : ", ") + config.filename().string();
      throw InputError(describe("--dataset-name " + source.dataset_name, "",
                                "has the configs " + names + " in " + snapshot.string() + ": choose one with --dataset-config"));
    }
  }
  std::vector<std::string> files = configs.empty() ? std::vector<std::string>{} : split_parquet_files(configs[0], split);
  if (files.empty()) {
    const std::string where = configs.empty() ? snapshot.string() + "/*" : configs[0].string();
    throw InputError(describe("--dataset-name " + source.dataset_name, "",
                              "no " + split + "-*.parquet or " + split + "/*.parquet in " + where + " (" + looked + ")"));
  }
  const fs::path folder = fs::path(files[0]).parent_path();
  if (origin) *origin = (folder / (folder.filename() == split ? "*.parquet" : split + "-*.parquet")).string();
  return files;
}

// Every file of an input has one format: `format` is this file's, checked before it is read.
void agree(const std::string& path, const std::string& format, SquadInput& input) {
  if (!input.format.empty() && format != input.format)
    throw InputError(describe(path, "",
                              "is " + format + ", but " + input.files[0] + " is " + input.format + ": one format at a time"));
  input.format = format;
}

// One file's records into `assembler`, or a nested file's dataset into `nested`.
void read_one(const std::string& path, const SquadSource& source, SquadInput& input, SquadAssembler& assembler,
              SquadDataset& nested) {
  if (is_parquet_file(path)) {
    agree(path, "Parquet", input);
    return read_parquet_records(path, source.columns, assembler);
  }
  const std::string text = read_file(path);
  if (is_json_lines(path, text)) {
    agree(path, "JSON Lines", input);
    return read_json_lines(path, text, source.columns, assembler);
  }
  const nlohmann::json document = parse_json_text(path, text);
  if (!is_nested_squad(document, source.columns)) {
    agree(path, "flat JSON", input);
    return read_flat_json(path, document, source.columns, assembler);
  }
  agree(path, "nested SQuAD JSON", input);
  if (input.files.size() > 1)
    throw InputError(describe(path, "", "nested SQuAD JSON is read one file at a time, not among others"));
  nested = squad_from_json(path, document);
}

}  // namespace

std::string hf_hub_cache_dir() {
  for (const char* name : {"HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"})
    if (!environment(name).empty()) return environment(name);
  if (!environment("HF_HOME").empty()) return environment("HF_HOME") + "/hub";
  if (!environment("XDG_CACHE_HOME").empty()) return environment("XDG_CACHE_HOME") + "/huggingface/hub";
  return environment("HOME") + "/.cache/huggingface/hub";
}

std::vector<std::string> squad_source_files(const SquadSource& source, std::string* origin) {
  if (source.input.empty() == source.dataset_name.empty())
    throw InputError("give either --input (a file, a folder or a glob pattern) or --dataset-name (an HF Hub dataset)");
  if (!source.dataset_name.empty()) return hub_dataset_files(source, origin);
  if (origin) *origin = source.input;
  if (fs::is_directory(source.input)) return folder_files(source.input, source.split);
  if (source.input.find_first_of("*?[") != std::string::npos && !fs::exists(source.input)) return glob_files(source.input);
  return {source.input};  // read_file names a missing one
}

SquadInput read_squad_input(const SquadSource& source) {
  if (source.split != "train" && source.split != "eval")
    throw InputError(describe("--split", source.split, "must be train or eval"));
  SquadInput input;
  input.files = squad_source_files(source, &input.origin);
  SquadAssembler assembler(input.origin);
  SquadDataset nested;
  for (const std::string& file : input.files) read_one(file, source, input, assembler, nested);
  input.data = input.format == "nested SQuAD JSON" ? std::move(nested) : assembler.finish();
  return input;
}

}  // namespace mpibert
