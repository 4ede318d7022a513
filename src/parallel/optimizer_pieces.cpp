#include "optimizer_pieces.hpp"

#include <torch/torch.h>

#include <map>
#include <optional>

#include "mpibert/core/error.hpp"

namespace mpibert {
namespace {

struct ElementRange {
  std::string parameter;
  int64_t begin = 0, end = -1;  // end -1: the whole parameter
};

// "NAME[BEGIN:END]" or "NAME".
std::optional<ElementRange> parse_range(const std::string& name) {
  ElementRange range{name};
  if (name.empty() || name.back() != ']') return range;
  const size_t open = name.rfind('['), colon = name.rfind(':');
  if (open == std::string::npos || colon == std::string::npos || colon < open) return std::nullopt;
  try {
    size_t used = 0;
    const std::string begin = name.substr(open + 1, colon - open - 1), end = name.substr(colon + 1, name.size() - colon - 2);
    range.begin = std::stoll(begin, &used);
    if (used != begin.size()) return std::nullopt;
    range.end = std::stoll(end, &used);
    if (used != end.size() || range.begin < 0 || range.end <= range.begin) return std::nullopt;
  } catch (const std::exception&) {
    return std::nullopt;
  }
  range.parameter = name.substr(0, open);
  return range;
}

struct Piece {
  int64_t begin, end;
  torch::Tensor flat;
  std::string origin;  // file and tensor, for errors
};

// moment ("exp_avg" / "exp_avg_sq") -> parameter -> pieces.
using PieceIndex = std::map<std::string, std::map<std::string, std::vector<Piece>>>;

PieceIndex index_pieces(const std::vector<SafetensorsFile>& files) {
  PieceIndex index;
  for (const SafetensorsFile& file : files) {
    for (const NamedTensor& tensor : file.tensors()) {
      const size_t dot = tensor.name.find('.');
      const std::string moment = tensor.name.substr(0, dot);
      if (dot == std::string::npos || (moment != "exp_avg" && moment != "exp_avg_sq")) continue;
      const std::string origin = describe(file.path(), tensor.name, "");
      const auto range = parse_range(tensor.name.substr(dot + 1));
      if (!range) throw InputError(describe(file.path(), tensor.name, "not a parameter range NAME[BEGIN:END]"));
      Piece piece{range->begin, range->end < 0 ? tensor.tensor.numel() : range->end, tensor.tensor.reshape({-1}), origin};
      if (piece.end - piece.begin != piece.flat.numel())
        throw InputError(describe(file.path(), tensor.name,
                                  "holds " + std::to_string(piece.flat.numel()) + " elements, its range " +
                                      std::to_string(piece.end - piece.begin)));
      index[moment][range->parameter].push_back(std::move(piece));
    }
  }
  return index;
}

const std::vector<Piece>* find_pieces(const PieceIndex& index, const std::string& moment, const std::string& parameter) {
  const auto of_moment = index.find(moment);
  if (of_moment == index.end()) return nullptr;
  const auto found = of_moment->second.find(parameter);
  return found == of_moment->second.end() ? nullptr : &found->second;
}

// Fills `target` (the elements [begin, end) of a parameter) from the pieces that overlap it.
void fill_from_pieces(torch::Tensor target, int64_t begin, int64_t end, const std::vector<Piece>& pieces,
                      const std::string& what) {
  torch::Tensor flat = target.view({-1});
  int64_t covered = 0;
  for (const Piece& piece : pieces) {
    const int64_t from = std::max(begin, piece.begin), to = std::min(end, piece.end);
    if (from >= to) continue;
    flat.narrow(0, from - begin, to - from).copy_(piece.flat.narrow(0, from - piece.begin, to - from));
    covered += to - from;
  }
  if (covered != end - begin)
    throw InputError(describe(what, "",
                              "the checkpoint's pieces cover " + std::to_string(covered) + " of its " +
                                  std::to_string(end - begin) + " elements (overlapping or missing pieces)"));
}

}  // namespace

void load_optimizer_pieces(AdamW& optimizer, const std::vector<SafetensorsFile>& files) {
  torch::NoGradGuard no_grad;
  const PieceIndex index = index_pieces(files);
  const std::string where = files.empty() ? "the checkpoint" : files.front().path();
  for (auto& slot : optimizer.slots()) {
    const auto range = parse_range(slot.name);
    const int64_t begin = range->begin, end = range->end < 0 ? slot.exp_avg.numel() : range->end;
    for (const auto& [moment, tensor] : {std::pair{"exp_avg", slot.exp_avg}, std::pair{"exp_avg_sq", slot.exp_avg_sq}}) {
      const std::vector<Piece>* pieces = find_pieces(index, moment, range->parameter);
      if (!pieces)
        throw InputError(describe(where, std::string(moment) + "." + range->parameter,
                                  "no optimizer state for this parameter in the checkpoint"));
      fill_from_pieces(tensor, begin, end, *pieces, std::string(moment) + "." + slot.name);
    }
  }
  std::optional<int64_t> steps;
  for (const SafetensorsFile& file : files) {
    const NamedTensor* saved = file.find("adam_steps");
    if (!saved) continue;
    if (saved->tensor.numel() != 1 || saved->tensor.scalar_type() != torch::kLong)
      throw InputError(describe(file.path(), "adam_steps", "must be one int64"));
    const int64_t value = saved->tensor.item<int64_t>();
    if (steps && *steps != value)
      throw InputError(describe(file.path(), "adam_steps",
                                std::to_string(value) + ", another file of the checkpoint says " + std::to_string(*steps)));
    steps = value;
  }
  if (!steps) throw InputError(describe(where, "adam_steps", "missing from every optimizer file of the checkpoint"));
  optimizer.set_steps_taken(*steps);
}

}  // namespace mpibert
