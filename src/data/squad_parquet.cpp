#include "mpibert/data/squad_parquet.hpp"

#include <arrow/array.h>
#include <arrow/io/file.h>
#include <arrow/memory_pool.h>
#include <arrow/record_batch.h>
#include <arrow/table.h>
#include <parquet/arrow/reader.h>
#include <parquet/arrow/schema.h>

#include <fstream>
#include <memory>
#include <string_view>
#include <vector>

#include "mpibert/core/error.hpp"

namespace mpibert {
namespace {

[[noreturn]] void unreadable(const std::string& path, const std::string& why) {
  throw InputError(describe(path, "", "not a readable Parquet file: " + why));
}

void checked(const arrow::Status& status, const std::string& path) {
  if (!status.ok()) unreadable(path, status.message());
}

template <typename T>
T checked(arrow::Result<T> result, const std::string& path) {
  checked(result.status(), path);
  return std::move(result).ValueOrDie();
}

bool is_string_type(const arrow::DataType& type) {
  return type.id() == arrow::Type::STRING || type.id() == arrow::Type::LARGE_STRING || type.id() == arrow::Type::STRING_VIEW;
}

// The item type of a list or large_list, else null.
const arrow::DataType* list_item(const arrow::DataType& type) {
  if (type.id() != arrow::Type::LIST && type.id() != arrow::Type::LARGE_LIST) return nullptr;
  return type.field(0)->type().get();
}

// answers: a struct of the lists text (strings) and answer_start (integers), as the Hub has it.
bool is_answers_type(const arrow::DataType& type) {
  if (type.id() != arrow::Type::STRUCT) return false;
  const auto& answers = static_cast<const arrow::StructType&>(type);
  const auto text = answers.GetFieldByName("text"), start = answers.GetFieldByName("answer_start");
  const arrow::DataType* text_item = text ? list_item(*text->type()) : nullptr;
  const arrow::DataType* start_item = start ? list_item(*start->type()) : nullptr;
  return text_item && is_string_type(*text_item) && start_item &&
         (start_item->id() == arrow::Type::INT32 || start_item->id() == arrow::Type::INT64);
}

// The Parquet leaf columns under a field, so that only the columns SQuAD needs are read.
void collect_leaves(const parquet::arrow::SchemaField& field, std::vector<int>& leaves) {
  if (field.is_leaf()) leaves.push_back(field.column_index);
  for (const auto& child : field.children) collect_leaves(child, leaves);
}

// Checks the columns' presence and types; returns the leaves to read.
std::vector<int> selected_leaves(const parquet::arrow::SchemaManifest& manifest, const arrow::Schema& schema,
                                 const SquadColumns& columns, const std::string& path) {
  std::string present;
  for (const auto& field : schema.fields()) present += (present.empty() ? "" : ", ") + field->name();
  std::vector<int> leaves;
  for (const std::string* name : {&columns.id, &columns.title, &columns.context, &columns.question, &columns.answers}) {
    const std::vector<int> found = schema.GetAllFieldIndices(*name);
    const std::string column = "column '" + *name + "'";
    if (found.size() > 1) throw InputError(describe(path, column, "appears " + std::to_string(found.size()) + " times"));
    if (found.empty()) {
      if (name == &columns.title) continue;  // optional: each paragraph is then an article
      throw InputError(describe(path, column, "missing (the file's columns: " + present + ")"));
    }
    const arrow::DataType& type = *schema.field(found[0])->type();
    const bool answers = name == &columns.answers;
    if (answers ? !is_answers_type(type) : !is_string_type(type))
      throw InputError(describe(path, column,
                                std::string("must be ") +
                                    (answers ? "a struct of the lists text (strings) and answer_start (integers)" : "strings") +
                                    ", not " + type.ToString()));
    collect_leaves(manifest.schema_fields[static_cast<size_t>(found[0])], leaves);
  }
  return leaves;
}

// A column of strings, whatever Arrow type holds them.
class Strings {
 public:
  explicit Strings(std::shared_ptr<arrow::Array> array) : array_(std::move(array)) {}
  bool present() const { return array_ != nullptr; }
  bool null(int64_t i) const { return array_->IsNull(i); }
  std::string_view at(int64_t i) const {
    switch (array_->type_id()) {
      case arrow::Type::STRING: return static_cast<const arrow::StringArray&>(*array_).GetView(i);
      case arrow::Type::LARGE_STRING: return static_cast<const arrow::LargeStringArray&>(*array_).GetView(i);
      default: return static_cast<const arrow::StringViewArray&>(*array_).GetView(i);
    }
  }

 private:
  std::shared_ptr<arrow::Array> array_;
};

// A column of lists (list or large_list): row i's items are values()[begin(i), end(i)).
class Lists {
 public:
  explicit Lists(const std::shared_ptr<arrow::Array>& array) : array_(array) {
    if (array->type_id() == arrow::Type::LIST) {
      values_ = static_cast<const arrow::ListArray&>(*array).values();
      offsets_ = static_cast<const arrow::ListArray&>(*array).raw_value_offsets();
    } else {
      values_ = static_cast<const arrow::LargeListArray&>(*array).values();
      large_offsets_ = static_cast<const arrow::LargeListArray&>(*array).raw_value_offsets();
    }
  }
  bool null(int64_t row) const { return array_->IsNull(row); }
  int64_t begin(int64_t row) const { return offsets_ ? offsets_[row] : large_offsets_[row]; }
  int64_t end(int64_t row) const { return offsets_ ? offsets_[row + 1] : large_offsets_[row + 1]; }
  const std::shared_ptr<arrow::Array>& values() const { return values_; }

 private:
  std::shared_ptr<arrow::Array> array_, values_;
  const int32_t* offsets_ = nullptr;
  const int64_t* large_offsets_ = nullptr;
};

// The SQuAD columns of one record batch, a row at a time.
class Rows {
 public:
  Rows(const arrow::RecordBatch& batch, const SquadColumns& columns)
      : columns_(columns),
        id_(batch.GetColumnByName(columns.id)),
        title_(batch.GetColumnByName(columns.title)),
        context_(batch.GetColumnByName(columns.context)),
        question_(batch.GetColumnByName(columns.question)),
        answers_(batch.GetColumnByName(columns.answers)),
        texts_(static_cast<const arrow::StructArray&>(*answers_).GetFieldByName("text")),
        starts_(static_cast<const arrow::StructArray&>(*answers_).GetFieldByName("answer_start")),
        text_values_(texts_.values()) {}

  SquadRecord record(int64_t row, const std::string& path, const std::string& where) const {
    SquadRecord record;
    record.id = text(id_, row, columns_.id, path, where);
    const std::string named = where + " (id " + record.id + ")";
    if (title_.present() && !title_.null(row)) record.title = text(title_, row, columns_.title, path, named);
    record.context = text(context_, row, columns_.context, path, named);
    record.question = text(question_, row, columns_.question, path, named);
    if (answers_->IsNull(row)) throw InputError(describe(path, named, "'" + columns_.answers + "' is null"));
    for (const auto* list : {&texts_, &starts_})
      if (list->null(row))
        throw InputError(describe(path, named,
                                  "'" + columns_.answers + (list == &texts_ ? ".text" : ".answer_start") + "' is null"));
    for (int64_t i = texts_.begin(row); i < texts_.end(row); ++i)
      record.answer_texts.push_back(text(text_values_, i, columns_.answers + ".text", path, named));
    const arrow::Array& starts = *starts_.values();
    for (int64_t i = starts_.begin(row); i < starts_.end(row); ++i) {
      if (starts.IsNull(i)) throw InputError(describe(path, named, "'" + columns_.answers + ".answer_start' holds a null"));
      record.answer_starts.push_back(starts.type_id() == arrow::Type::INT32
                                         ? static_cast<const arrow::Int32Array&>(starts).Value(i)
                                         : static_cast<const arrow::Int64Array&>(starts).Value(i));
    }
    return record;
  }

 private:
  static std::string text(const Strings& column, int64_t i, const std::string& name, const std::string& path,
                          const std::string& where) {
    if (column.null(i)) throw InputError(describe(path, where, "'" + name + "' holds a null"));
    return std::string(column.at(i));
  }

  const SquadColumns& columns_;
  Strings id_, title_, context_, question_;
  std::shared_ptr<arrow::Array> answers_;
  Lists texts_, starts_;
  Strings text_values_;
};

void read_records(const std::string& path, const SquadColumns& columns, SquadAssembler& assembler) {
  // The system allocator (not the wheel's jemalloc or mimalloc): sanitizers and leak checks see it.
  arrow::MemoryPool* pool = arrow::system_memory_pool();
  auto reader = checked(parquet::arrow::OpenFile(checked(arrow::io::ReadableFile::Open(path, pool), path), pool), path);
  std::shared_ptr<arrow::Schema> schema;
  checked(reader->GetSchema(&schema), path);
  const std::vector<int> leaves = selected_leaves(reader->manifest(), *schema, columns, path);
  int64_t row = 0;
  for (int group = 0; group < reader->num_row_groups(); ++group) {
    const std::shared_ptr<arrow::Table> table = checked(reader->ReadRowGroup(group, leaves), path);
    checked(table->ValidateFull(), path);  // offsets and lengths within their buffers, valid UTF-8
    arrow::TableBatchReader batches(*table);
    std::shared_ptr<arrow::RecordBatch> batch;
    for (checked(batches.ReadNext(&batch), path); batch; checked(batches.ReadNext(&batch), path)) {
      const Rows rows(*batch, columns);
      for (int64_t i = 0; i < batch->num_rows(); ++i, ++row) {
        const std::string where = "row " + std::to_string(row);
        assembler.add(rows.record(i, path, where), path, where);
      }
    }
  }
}

}  // namespace

bool is_parquet_file(const std::string& path) {
  char magic[4] = {};
  std::ifstream in(path, std::ios::binary);
  return in.read(magic, sizeof magic) && std::string_view(magic, sizeof magic) == "PAR1";
}

void read_parquet_records(const std::string& path, const SquadColumns& columns, SquadAssembler& assembler) {
  try {
    read_records(path, columns, assembler);
  } catch (const InputError&) {
    throw;
  } catch (const std::exception& e) {  // parquet::ParquetException, std::bad_alloc for sizes a corrupt footer claims
    unreadable(path, e.what());
  }
}

}  // namespace mpibert
