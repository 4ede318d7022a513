// Internal: AdamW's state as checkpoints hold it, in pieces of parameters (DeepSpeed's universal
// checkpoint): each saved moment is a range of one parameter's flattened elements,
// "exp_avg.NAME[BEGIN:END]" ("exp_avg.NAME" for a whole parameter). Whatever strategy and number
// of ranks wrote them, a rank puts every moment it holds together from the pieces that cover it.
#pragma once

#include <vector>

#include "mpibert/nn/safetensors.hpp"
#include "mpibert/optim/optimizer.hpp"

namespace mpibert {

// Fills `optimizer`'s moments and step count from the pieces in `files` (every rank's file of a
// checkpoint); a moment no piece covers is an InputError naming it.
void load_optimizer_pieces(AdamW& optimizer, const std::vector<SafetensorsFile>& files);

}  // namespace mpibert
