// Questions to answer without shards (`mpibert predict --questions FILE`): JSON Lines, one object a
// line with the strings "question" and "context" and, optionally, "id", as the dicts HF's
// question-answering pipeline takes; other fields (run_qa's "title", "answers") are ignored, so a
// SQuAD JSON Lines file serves as it is. Each question is an example of its own context.
#pragma once

#include <string>

#include "mpibert/data/squad.hpp"

namespace mpibert {

// The questions of `text` (the contents of `path`), in file order; an example without "id" is
// named by its line ("line 3"). Every problem is an InputError naming the file, the line and the
// field; a file without a question is one too.
SquadDataset read_question_lines(const std::string& path, const std::string& text);

}  // namespace mpibert
