// SQuAD JSON in the layouts users have: SQuAD's own nested file (data/paragraphs/qas, read by
// squad.hpp), run_qa.py's flat JSON ({"data": [records]} or a bare array of records, as datasets'
// to_json(lines=False) writes them) and JSON Lines (a record a line, as to_json writes by default,
// whatever the file's name). Records are squad_records.hpp's.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <functional>
#include <string>

#include "mpibert/data/squad_records.hpp"

namespace mpibert {

// Whether a JSON file's text (inflated) is JSON Lines: a .jsonl or .ndjson name, or a first line
// that is a whole JSON value followed by more text.
bool is_json_lines(const std::string& path, const std::string& text);

// Whether a parsed JSON document is SQuAD's nested layout rather than flat records: anything but
// an array, a lone record, or a "data" array whose first item is a record (no "paragraphs").
bool is_nested_squad(const nlohmann::json& document, const SquadColumns& columns);

// Calls `each` with every non-blank line of JSON Lines `text` (of `path`), parsed, and where it is
// ("line N", from 1). A line that is not JSON is an InputError naming it.
void for_each_json_line(const std::string& path, const std::string& text,
                        const std::function<void(const nlohmann::json& value, const std::string& where)>& each);

// Adds each line's record to `assembler`. A line that is not JSON, or no record, is an InputError
// naming its line number (from 1); blank lines are skipped.
void read_json_lines(const std::string& path, const std::string& text, const SquadColumns& columns, SquadAssembler& assembler);

// Adds the records of a flat document: {"data": [records]}, [records], or one record.
void read_flat_json(const std::string& path, const nlohmann::json& document, const SquadColumns& columns,
                    SquadAssembler& assembler);

}  // namespace mpibert
