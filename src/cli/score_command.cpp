// `mpibert score`: a drop-in for the official SQuAD scripts, printing what they print.
#include <ostream>

#include "mpibert/cli/commands.hpp"
#include "mpibert/core/error.hpp"
#include "mpibert/core/io.hpp"
#include "mpibert/eval/squad_metrics.hpp"

namespace mpibert {

int score_command(const std::string& dataset_path, const std::string& predictions_path, const std::string& na_prob_path,
                  double na_prob_thresh, const std::string& out_file, std::ostream& out, std::ostream& err) {
  try {
    const SquadDataset data = read_squad(dataset_path);
    ScoreOptions options;
    options.v2 = uses_squad_v2_rules(data);
    options.na_prob_thresh = na_prob_thresh;
    options.predictions_name = predictions_path;
    if (!options.v2 && data.version != "1.1") err << "Evaluation expects v-1.1, but got dataset with v-" << data.version << '\n';
    const SquadPredictions predictions = read_squad_predictions(predictions_path);
    if (!na_prob_path.empty()) {
      options.na_probs = read_no_answer_probabilities(na_prob_path);
      options.na_probs_name = na_prob_path;
    }
    // evaluate-v1.1.py reports unanswered questions on stderr, evaluate-v2.0.py on stdout.
    const nlohmann::ordered_json result = score_squad(data, predictions, options, options.v2 ? out : err);
    if (!out_file.empty())
      write_file_atomic(out_file, python_json_dumps(result, false));
    else
      out << python_json_dumps(result, options.v2) << '\n';
    out.flush();
    return 0;
  } catch (const InputError& e) {
    out.flush();
    err << "mpibert score: " << e.what() << '\n';
    return 1;
  }
}

}  // namespace mpibert
