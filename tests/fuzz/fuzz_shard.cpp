// HDF5 feature shards, structure and datasets: the input describes a shard file (which of the
// header attributes and datasets exist, their element types, shapes and values), the harness
// writes it with the HDF5 library, and read_shard must refuse it with an InputError or hand out
// features and examples whose every view stays inside the arrays. (Byte-level damage to the file
// is HDF5's own parser and the datasets' Fletcher-32 checksums: see test_shards.cpp.)
#include <fuzzer/FuzzedDataProvider.h>
#include <hdf5.h>

#include <cstdio>

#include "fuzz_input.hpp"
#include "mpibert/core/error.hpp"
#include "mpibert/data/shards.hpp"

namespace {

// The shard's sizes, chosen first so that most files are nearly consistent and the reader's
// deeper checks are reached; every value below deviates from them now and then.
struct Counts {
  int64_t tokens, features, examples, contexts;
};

const char* const kStringAttributes[] = {"split", "input_sha256", "tokenizer_sha256", "tool_version"};
enum class Extent { tokens, features, examples, contexts, bytes, offsets };
struct Dataset {
  const char* name;
  hid_t type;  // as the writer stores it
  hsize_t columns;
  Extent extent;
  int64_t typical_max;  // values mostly in [-1, typical_max]; 0: the extent's own count
};
const Dataset kDatasets[] = {
    {"/features/input_ids", H5T_STD_U16LE, 1, Extent::tokens, 30521},
    {"/features/offsets", H5T_STD_I32LE, 2, Extent::tokens, 40},
    {"/features/lengths", H5T_STD_U16LE, 1, Extent::features, 12},
    {"/features/context_starts", H5T_STD_U16LE, 1, Extent::features, 12},
    {"/features/example_indices", H5T_STD_I64LE, 1, Extent::features, 0},
    {"/features/window_indices", H5T_STD_U16LE, 1, Extent::features, 3},
    {"/features/start_positions", H5T_STD_U16LE, 1, Extent::features, 12},
    {"/features/end_positions", H5T_STD_U16LE, 1, Extent::features, 12},
    {"/examples/is_impossible", H5T_STD_U8LE, 1, Extent::examples, 1},
    {"/examples/context_indices", H5T_STD_I32LE, 1, Extent::examples, 0},
    {"/examples/ids.bytes", H5T_STD_U8LE, 1, Extent::bytes, 255},
    {"/examples/ids.offsets", H5T_STD_I64LE, 1, Extent::offsets, 0},
    {"/examples/questions.bytes", H5T_STD_U8LE, 1, Extent::bytes, 255},
    {"/examples/questions.offsets", H5T_STD_I64LE, 1, Extent::offsets, 0},
    {"/examples/answers_json.bytes", H5T_STD_U8LE, 1, Extent::bytes, 255},
    {"/examples/answers_json.offsets", H5T_STD_I64LE, 1, Extent::offsets, 0},
    {"/contexts/contexts.bytes", H5T_STD_U8LE, 1, Extent::bytes, 255},
    {"/contexts/contexts.offsets", H5T_STD_I64LE, 1, Extent::offsets, 0},
};
const hid_t kOtherTypes[] = {H5T_STD_U8LE, H5T_STD_I32LE, H5T_STD_I64LE, H5T_IEEE_F32LE, H5T_STD_U16BE, H5T_STD_U32LE};

bool now_and_then(FuzzedDataProvider& input) { return input.ConsumeIntegralInRange(0, 15) == 0; }
bool rarely(FuzzedDataProvider& input) { return input.ConsumeIntegralInRange(0, 63) == 0; }

// A typical value, or now and then any.
int64_t value_near(FuzzedDataProvider& input, int64_t typical_max) {
  return now_and_then(input) ? input.ConsumeIntegral<int64_t>() : input.ConsumeIntegralInRange<int64_t>(-1, typical_max);
}

void write_integer_attribute(hid_t file, hid_t space, FuzzedDataProvider& input, const char* name, int64_t typical) {
  if (rarely(input)) return;  // missing
  const int64_t value = now_and_then(input) ? input.ConsumeIntegral<int64_t>() : typical;
  const hid_t type = now_and_then(input) ? H5T_IEEE_F64LE : H5T_STD_I64LE;
  const hid_t attribute = H5Acreate2(file, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
  H5Awrite(attribute, H5T_NATIVE_INT64, &value);
  H5Aclose(attribute);
}

void write_attributes(hid_t file, FuzzedDataProvider& input, const Counts& counts, int64_t first_example) {
  const hid_t scalar = H5Screate(H5S_SCALAR);
  const std::pair<const char*, int64_t> integers[] = {{"format_version", 2},
                                                      {"max_seq_length", 384},
                                                      {"doc_stride", 128},
                                                      {"max_query_length", 0},
                                                      {"shard_index", 0},
                                                      {"num_shards", 1},
                                                      {"first_example", first_example},
                                                      {"num_examples", counts.examples},
                                                      {"num_features", counts.features}};
  for (const auto& [name, typical] : integers) write_integer_attribute(file, scalar, input, name, typical);
  for (const char* name : kStringAttributes) {
    if (rarely(input)) continue;  // missing
    const std::string value = input.ConsumeRandomLengthString(40);
    const hid_t type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, std::max<size_t>(value.size(), 1));
    H5Tset_cset(type, rarely(input) ? H5T_CSET_ASCII : H5T_CSET_UTF8);
    const hid_t attribute = H5Acreate2(file, name, type, scalar, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(attribute, type, value.c_str());
    H5Aclose(attribute);
    H5Tclose(type);
  }
  H5Sclose(scalar);
}

// Each string table's strings are 0-3 bytes: offsets count up from 0 by small steps.
void write_datasets(hid_t file, FuzzedDataProvider& input, const Counts& counts, int64_t first_example) {
  const hid_t links = H5Pcreate(H5P_LINK_CREATE);
  H5Pset_create_intermediate_group(links, 1);
  int64_t string_rows = counts.examples + 1, string_bytes = 0;
  for (const Dataset& dataset : kDatasets) {
    if (rarely(input)) continue;  // missing
    const hid_t type = now_and_then(input) ? input.PickValueInArray(kOtherTypes) : dataset.type;
    if (dataset.extent == Extent::offsets && std::string(dataset.name).rfind("/contexts", 0) == 0)
      string_rows = counts.contexts + 1;
    const int64_t per_extent[] = {counts.tokens, counts.features, counts.examples, counts.contexts, string_bytes, string_rows};
    hsize_t dims[2] = {static_cast<hsize_t>(per_extent[static_cast<int>(dataset.extent)]), dataset.columns};
    if (now_and_then(input)) dims[0] = input.ConsumeIntegralInRange<hsize_t>(0, 24);
    if (now_and_then(input)) dims[1] += 1;
    const int rank = dims[1] == 1 && !now_and_then(input) ? 1 : 2;
    std::vector<int64_t> values(dims[0] * dims[1]);
    const int64_t typical_max = dataset.typical_max                  ? dataset.typical_max
                                : dataset.extent == Extent::features ? first_example + counts.examples - 1
                                                                     : counts.contexts - 1;
    int64_t offset = 0;
    for (size_t i = 0; i < values.size(); ++i) {
      if (dataset.extent == Extent::offsets)
        values[i] = now_and_then(input) ? input.ConsumeIntegral<int64_t>()
                                        : (offset += i ? input.ConsumeIntegralInRange(0, 3) : 0);
      else
        values[i] = value_near(input, typical_max);
    }
    if (dataset.extent == Extent::bytes) string_bytes = static_cast<int64_t>(values.size());
    const hid_t space = H5Screate_simple(rank, dims, nullptr);
    const hid_t handle = H5Dcreate2(file, dataset.name, type, space, links, H5P_DEFAULT, H5P_DEFAULT);
    if (!values.empty()) H5Dwrite(handle, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data());
    H5Dclose(handle);
    H5Sclose(space);
  }
  H5Pclose(links);
}

// Reads every byte each view points at, so that AddressSanitizer sees any view past an array.
void touch_everything(const mpibert::FeatureStore& store, int64_t first_example) {
  volatile int64_t sum = 0;
  for (int64_t i = 0; i < store.num_features(); ++i) {
    const mpibert::FeatureView feature = store.feature(i);
    for (int32_t t = 0; t < feature.length; ++t) sum += feature.input_ids[t] + feature.offsets[2 * t + 1];
    const mpibert::ExampleView example = store.example(feature.example_index - first_example);
    sum += static_cast<int64_t>(example.id->size() + example.question->size() + example.context->size());
  }
  for (int64_t i = 0; i < store.num_examples(); ++i) sum += static_cast<int64_t>(store.example(i).answers_json->size());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  FuzzedDataProvider input(data, size);
  const std::string path = mpibert::fuzz::scratch_dir() + "/shard-00000-of-00001.h5";
  Counts counts{0, input.ConsumeIntegralInRange<int64_t>(0, 8), input.ConsumeIntegralInRange<int64_t>(0, 6),
                input.ConsumeIntegralInRange<int64_t>(0, 4)};
  counts.tokens = input.ConsumeIntegralInRange<int64_t>(0, 12 * counts.features);
  const int64_t first_example = input.ConsumeIntegralInRange<int64_t>(0, 3);
  const hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  write_attributes(file, input, counts, first_example);
  write_datasets(file, input, counts, first_example);
  H5Fclose(file);
  try {
    mpibert::Shard shard = mpibert::read_shard(path);
    const int64_t first_example = shard.header.first_example;  // features name examples globally
    touch_everything(mpibert::FeatureStore::from_shard(std::move(shard)), first_example);
  } catch (const mpibert::InputError& error) {
    if (std::getenv("MPIBERT_FUZZ_SHOW_ERRORS")) std::fprintf(stderr, "%s\n", error.what());  // where inputs stop
  }
  return 0;
}
