#include "cli/vocab_command.h"

#include "engine/data/text/text_spec.h"
#include "engine/data/text/vocab_builder.h"

namespace dpcore::cli {

void write_vocab(const VocabOptions& options, std::ostream& log) {
  const data::text::TextDataset train = data::text::load_text_split(options.data, data::Split::train);
  data::text::VocabSummary summary;
  const data::text::Vocab vocab = data::text::build_vocab(train.texts, options.vocab_size, &summary);
  vocab.write(options.out);
  log << "vocab: " << train.name << ": " << summary.texts << " texts, " << summary.words << " words ("
      << summary.distinct_words << " distinct), " << summary.alphabet << " characters and ##-characters, "
      << summary.merges << " merges: " << vocab.size() << " tokens written to " << options.out << "\n";
}

}  // namespace dpcore::cli
