#include <nlohmann/json.hpp>

#include <istream>
#include <ostream>

#include "mpibert/cli/commands.hpp"
#include "mpibert/core/error.hpp"

namespace mpibert {

int tokenize_lines(const HfTokenizer& tokenizer, std::istream& in, std::ostream& out, std::ostream& err) {
  std::string line;
  int status = 0;
  for (size_t line_number = 1; std::getline(in, line); ++line_number) {
    try {
      const TokenizedText encoding = tokenizer.encode(line);
      nlohmann::ordered_json offsets = nlohmann::ordered_json::array();
      for (const auto& span : encoding.offsets) offsets.push_back({span.begin, span.end});
      nlohmann::ordered_json record = {{"tokens", encoding.tokens}, {"ids", encoding.ids}, {"offsets", offsets}};
      out << record.dump() << '\n';
    } catch (const InputError& e) {
      err << describe("stdin", "line " + std::to_string(line_number), e.what()) << '\n';
      status = 1;
    }
  }
  out.flush();
  return status;
}

}  // namespace mpibert
