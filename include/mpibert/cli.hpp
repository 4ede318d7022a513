// Subcommands of the `mpibert` binary, callable from tests.
#pragma once

#include <iosfwd>

#include "mpibert/tokenizer.hpp"

namespace mpibert {

// `mpibert tokenize`: one JSON object per input line, {"tokens", "ids", "offsets"} for the text
// alone (no special tokens); offsets are [begin, end) code points. Returns the exit status:
// a line that is not UTF-8 is reported on `err` with its line number and gives 1.
int tokenize_lines(const WordPieceTokenizer& tokenizer, std::istream& in, std::ostream& out, std::ostream& err);

}  // namespace mpibert
