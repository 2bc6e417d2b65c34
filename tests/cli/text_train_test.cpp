// `dpcore train` on text (docs/text.md, "Training"): --data text:FILE.tsv tokenized with the
// committed vocabulary, bert-tiny with the data's classes, batches padded per batch, and
// the confusion table at the end; a text longer than --max-len is refused naming its line.
// Then `dpcore classify` with the saved weights and class names.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli_run.h"
#include "engine/data/spec.h"
#include "engine/data/text/vocab.h"
#include "engine/io/safetensors.h"
#include "layers/weights.h"
#include "layers/zoo.h"
#include "same_maths.h"
#include "support/test_support.h"

namespace dpcore::testing {
namespace {

const std::string kTexts = source_dir() + "/tests/fixtures/text/tiny_topics.tsv";
const std::string kTextJob = "train --model bert-tiny --data text:" + kTexts +
                             " --optimizer adamw --lr 1e-3 --batch 16 --threads 1 --progress 0 --device cpu";

TEST(TextTraining, BertTinyLearnsTheTsvClassesAndEndsWithTheConfusionTable) {
  TempDir dir;
  const CommandResult r = run(kTextJob + " --steps 3 --bucket-by-length --save " + dir.file("w.safetensors"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("texts of "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("3 classes"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(", task classify, max length 128, bucketed by length"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("class_to_idx: {\"computers\":0,\"cooking\":1,\"sailing\":2}"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("test accuracy"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("confusion (rows: true class, columns: predicted)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("recall"), std::string::npos) << r.output;
  EXPECT_EQ(slurp(dir.file("w.class_to_idx.json")), "{\"computers\":0,\"cooking\":1,\"sailing\":2}\n");
}

TEST(TextTraining, ATextLongerThanMaxLenIsRefusedNamingItsLineUnlessTruncated) {
  const CommandResult r = run(kTextJob + " --steps 1 --max-len 10");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find(kTexts + " line "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("is longer than the maximum length 10"), std::string::npos) << r.output;
  const CommandResult t = run(kTextJob + " --steps 1 --max-len 10 --truncate");
  EXPECT_EQ(t.status, 0) << t.output;
  EXPECT_NE(t.output.find("texts of "), std::string::npos) << t.output;
}

TEST(TextTraining, TextFlagsOnImagesAndBadTextDataAreRefusedInWords) {
  const CommandResult images = run(job() + " --steps 1 --bucket-by-length");
  EXPECT_EQ(images.status, 1) << images.output;
  EXPECT_NE(images.output.find("--bucket-by-length"), std::string::npos) << images.output;
  const CommandResult missing = run(kTextJob + " --steps 1 --vocab /nonexistent/vocab.txt");
  EXPECT_EQ(missing.status, 1) << missing.output;
  EXPECT_NE(missing.output.find("/nonexistent/vocab.txt"), std::string::npos) << missing.output;
  TempDir dir;
  const CommandResult no_tab = run("train --model bert-tiny --data text:" + dir.file("none.tsv") + " --steps 1");
  EXPECT_EQ(no_tab.status, 1) << no_tab.output;
  EXPECT_NE(no_tab.output.find("none.tsv not found"), std::string::npos) << no_tab.output;
  std::ofstream(dir.file("bad.tsv")) << "a\tfine\nno tab here\n";
  const CommandResult bad_line = run("train --model bert-tiny --data text:" + dir.file("bad.tsv") + " --steps 1");
  EXPECT_EQ(bad_line.status, 1) << bad_line.output;
  EXPECT_NE(bad_line.output.find(dir.file("bad.tsv") + " line 2: no tab"), std::string::npos) << bad_line.output;
  const CommandResult task = run(kTextJob + " --steps 1 --task translate");
  EXPECT_NE(task.status, 0) << task.output;
  EXPECT_NE(task.output.find("--task translate: must be one of classify, mlm"), std::string::npos) << task.output;
}

// The token-balanced scatter keeps the step exact: 2 replicas (dp) and 3 (ddp) train the
// parameters one replica does, within float32's reordered sums (same_maths.h), dropout
// included (its draws follow the sample, not the replica).
TEST(TextTraining, TwoAndThreeReplicasSplitByTokensTrainWhatOneReplicaDoes) {
  TempDir dir;
  // SGD: a step linear in the gradient, so reordered sums stay rounding-sized (Adam's
  // g / sqrt(v) would magnify them where a gradient is rounding noise, as the key biases'
  // are: softmax ignores a bias added to every key).
  const std::string job = "train --model bert-tiny --data text:" + kTexts +
                          " --optimizer sgd --lr 0.05 --batch 16 --threads 1 --progress 0 --device cpu";
  const std::string steps = " --steps 3 --seed 5 --save ";
  const CommandResult one = run(job + steps + dir.file("one.safetensors"));
  ASSERT_EQ(one.status, 0) << one.output;
  const CommandResult two = run(job + " --replicas 2 --mode dp" + steps + dir.file("two.safetensors"));
  ASSERT_EQ(two.status, 0) << two.output;
  const CommandResult three = run(job + " --replicas 3 --mode ddp" + steps + dir.file("three.safetensors"));
  ASSERT_EQ(three.status, 0) << three.output;
  // (Per tensor, but relative to the model's largest parameter: the key biases are noise.)
  expect_same_maths(dir.file("one.safetensors"), dir.file("two.safetensors"), 1e-5, true);
  expect_same_maths(dir.file("one.safetensors"), dir.file("three.safetensors"), 1e-5, true);
  EXPECT_NE(two.output.find("data parallel (dp, local) over 2 replicas"), std::string::npos) << two.output;
}

TEST(TextTraining, ExplainShowsTheTokensOfEachReplica) {
  const CommandResult r = run(kTextJob + " --steps 1 --replicas 2 --explain");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("--split even, by tokens"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("int64 token ids, padded to the batch's longest text"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(" tokens), replica 1 rows "), std::string::npos) << r.output;
}

// `name` of the committed vocabulary's size and the tiny topics' 3 classes (a bert-tiny of
// kTextJob's shape), initialised with `seed`, its weights written to `path`.
void save_reference_bert(const std::string& name, int64_t classes, uint64_t seed, const std::string& path) {
  layers::ModelDef def = layers::reference_model(name, {128}, classes, data::text::Vocab::read(data::kDefaultVocab).size());
  layers::save_weights(layers::Model(std::move(def.net), def.input_shape, Device::cpu(), DType::Float32, seed), path);
}

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

// Fine-tuning from a masked-LM file (docs/text.md): the encoder starts as the file's, the
// pooler and the classifier as a run without --init-from starts them (--lr 0: the saved
// weights are the start), and the log lists what was loaded, new and unused.
TEST(TextTraining, InitFromAMaskedLanguageModelLoadsTheEncoderAndStartsANewHead) {
  TempDir dir;
  const std::string mlm = dir.file("mlm.safetensors");
  save_reference_bert("bert-tiny-mlm", 3, 7, mlm);
  const std::string job = "train --model bert-tiny --data text:" + kTexts +
                          " --optimizer sgd --lr 0 --batch 16 --threads 1 --progress 0 --device cpu --steps 1 "
                          "--seed 5 --save ";
  const CommandResult tuned = run(job + dir.file("tuned.safetensors") + " --init-from " + mlm);
  ASSERT_EQ(tuned.status, 0) << tuned.output;
  const CommandResult fresh = run(job + dir.file("fresh.safetensors"));
  ASSERT_EQ(fresh.status, 0) << fresh.output;

  const io::SafetensorsFile file = io::load_safetensors(mlm), start = io::load_safetensors(dir.file("tuned.safetensors")),
                            fresh_start = io::load_safetensors(dir.file("fresh.safetensors"));
  size_t loaded = 0, unused = 0;
  for (const io::TensorRecord& t : start.tensors()) {
    const bool encoder = starts_with(t.name, "bert.") && !starts_with(t.name, "bert.pooler.");
    const io::TensorRecord* expected = (encoder ? file : fresh_start).find(t.name);
    ASSERT_NE(expected, nullptr) << t.name;
    EXPECT_EQ(t.data, expected->data) << t.name << (encoder ? " is not the file's" : " is not a fresh model's");
    loaded += encoder ? 1 : 0;
  }
  for (const io::TensorRecord& t : file.tensors()) unused += start.find(t.name) ? 0 : 1;
  EXPECT_EQ(loaded, start.tensors().size() - 4);
  const std::string report = "--init-from " + mlm + ": loaded " + std::to_string(loaded) + " of the " +
                             std::to_string(start.tensors().size()) + " tensors of bert-tiny; 4 newly initialized, " +
                             std::to_string(unused) + " of the file's not used\n";
  EXPECT_NE(tuned.output.find(report), std::string::npos) << tuned.output;
  EXPECT_NE(tuned.output.find("  newly initialized (not in the file, so as bert-tiny starts): bert.pooler.dense.weight, "
                              "bert.pooler.dense.bias, classifier.weight, classifier.bias\n"),
            std::string::npos)
      << tuned.output;
  EXPECT_NE(tuned.output.find("  not used (bert-tiny has no such tensor): cls.predictions."), std::string::npos)
      << tuned.output;
  EXPECT_NE(tuned.output.find("  loaded: bert.embeddings.word_embeddings.weight, "), std::string::npos) << tuned.output;
}

TEST(TextTraining, InitFromRefusesAnotherShapeAnotherModelACheckpointAndInitOrResumeBesideIt) {
  TempDir dir;
  const std::string two_labels = dir.file("two.safetensors");
  save_reference_bert("bert-tiny", 2, 1, two_labels);
  const CommandResult shape = run(kTextJob + " --steps 1 --init-from " + two_labels);
  EXPECT_EQ(shape.status, 1) << shape.output;
  EXPECT_NE(shape.output.find(two_labels + ": tensor 'classifier.weight' has shape [2, 128] but the model's "
                                           "classifier.weight is [3, 128]"),
            std::string::npos)
      << shape.output;

  const std::string image = dir.file("image.safetensors");
  ASSERT_EQ(run(job() + " --steps 1 --save " + image).status, 0);
  const CommandResult other = run(kTextJob + " --steps 1 --init-from " + image);
  EXPECT_EQ(other.status, 1) << other.output;
  EXPECT_NE(other.output.find(image + ": no tensor of bert-tiny is in it; is it a checkpoint of another model?"),
            std::string::npos)
      << other.output;

  ASSERT_EQ(run(kTextJob + " --steps 1 --checkpoint " + dir.file("ck")).status, 0);
  const std::string checkpoint = dir.file("ck") + "/checkpoint.safetensors";
  const CommandResult ck = run(kTextJob + " --steps 1 --init-from " + checkpoint);
  EXPECT_EQ(ck.status, 1) << ck.output;
  EXPECT_NE(ck.output.find("--init-from " + checkpoint + ": is a dpcore training checkpoint"), std::string::npos)
      << ck.output;
  EXPECT_NE(ck.output.find("--save"), std::string::npos) << ck.output;

  const CommandResult resume =
      run(kTextJob + " --steps 2 --checkpoint " + dir.file("ck") + " --resume --init-from " + two_labels);
  EXPECT_EQ(resume.status, 1) << resume.output;
  EXPECT_NE(resume.output.find("--init-from " + two_labels + " with --resume: "), std::string::npos) << resume.output;

  const CommandResult both = run(kTextJob + " --steps 1 --init " + two_labels + " --init-from " + two_labels);
  EXPECT_EQ(both.status, 1) << both.output;
  EXPECT_NE(both.output.find("--init " + two_labels + " and --init-from " + two_labels + ": give one"),
            std::string::npos)
      << both.output;
}

// The lines classify prints for one text: the text, then "  NAME  P" per class of the top.
std::vector<std::pair<std::string, double>> top_classes(const std::string& output, const std::string& text) {
  std::istringstream lines(output.substr(output.find(text + "\n") + text.size() + 1));
  std::vector<std::pair<std::string, double>> top;
  for (std::string line; std::getline(lines, line) && line.rfind("  ", 0) == 0;) {
    std::istringstream fields(line);
    std::string name;
    double p = 0;
    fields >> name >> p;
    top.emplace_back(name, p);
  }
  return top;
}

// Issue 26 item 8: fine-tuning from a masked-LM file is one replica's run on 4 local
// replicas and as 2 mpirun processes, and its checkpoint written by 2 replicas resumes on 1
// (without --init-from: the checkpoint holds the weights). SGD, as above.
TEST(TextTraining, FineTuningIsOneReplicasOnFourReplicasUnderMpirunAndAfterAResumeOnAnotherCount) {
  TempDir dir;
  const std::string mlm = dir.file("mlm.safetensors");
  save_reference_bert("bert-tiny-mlm", 3, 7, mlm);
  const std::string job = "train --model bert-tiny --data text:" + kTexts +
                          " --optimizer sgd --lr 0.05 --batch 16 --threads 1 --progress 0 --device cpu --seed 5 --steps 6";
  const std::string tune = job + " --init-from " + mlm;
  const CommandResult one = run(tune + " --save " + dir.file("one.safetensors"));
  ASSERT_EQ(one.status, 0) << one.output;
  const CommandResult four = run(tune + " --replicas 4 --mode ddp --save " + dir.file("four.safetensors"));
  ASSERT_EQ(four.status, 0) << four.output;
  expect_same_maths(dir.file("one.safetensors"), dir.file("four.safetensors"), 1e-5, true);
#ifdef DPCORE_MPIEXEC
  const CommandResult mpi = run_command(tune + " --backend mpi --mode ddp --save " + dir.file("mpi.safetensors"),
                                        mpirun(2));
  ASSERT_EQ(mpi.status, 0) << mpi.output;
  expect_same_maths(dir.file("one.safetensors"), dir.file("mpi.safetensors"), 1e-5, true);
#endif
  // Two replicas stop after step 3 with a checkpoint; one replica takes it to step 6.
  const std::string ck = " --checkpoint " + dir.file("ck");
  const CommandResult first = run(tune + " --replicas 2 --checkpoint-every 3 --inject exit:replica=1,step=4" + ck);
  ASSERT_EQ(first.status, 75) << first.output;
  const CommandResult resumed = run(job + " --resume --save " + dir.file("resumed.safetensors") + ck);
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("at step 3 (epoch 1), written by distributed data parallel (ddp, local) over 2 replicas"),
            std::string::npos)
      << resumed.output;
  expect_same_maths(dir.file("one.safetensors"), dir.file("resumed.safetensors"), 1e-5, true);
}

TEST(Classify, PrintsTheTopClassesOfTheSavedClassListWithTheirProbabilities) {
  TempDir dir;
  const std::string weights = dir.file("w.safetensors");
  const CommandResult trained = run(kTextJob + " --epochs 2 --save " + weights);
  ASSERT_EQ(trained.status, 0) << trained.output;
  const std::string text = "the boat heeled in the strong wind";
  const CommandResult r = run("classify --weights " + weights + " \"" + text + "\"");
  ASSERT_EQ(r.status, 0) << r.output;
  const auto top = top_classes(r.output, text);
  ASSERT_EQ(top.size(), 3u) << r.output;  // --top 3 of 3 classes: every class once
  double sum = 0;
  std::vector<std::string> names;
  for (size_t k = 0; k < top.size(); ++k) {
    sum += top[k].second, names.push_back(top[k].first);
    if (k > 0) EXPECT_LE(top[k].second, top[k - 1].second) << r.output;
  }
  EXPECT_NEAR(sum, 1.0, 2e-4) << r.output;  // three values printed to 4 decimals
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"computers", "cooking", "sailing"}));
  // Lines on stdin, --top 1: the same top class.
  const CommandResult piped =
      run_command("classify --top 1 --weights " + weights, "printf '%s\\nbake the bread\\n' \"" + text + "\" |");
  ASSERT_EQ(piped.status, 0) << piped.output;
  ASSERT_EQ(top_classes(piped.output, text).size(), 1u) << piped.output;
  EXPECT_EQ(top_classes(piped.output, text)[0].first, top[0].first) << piped.output;
  EXPECT_EQ(top_classes(piped.output, "bake the bread").size(), 1u) << piped.output;
}

TEST(Classify, AMissingClassListOrALongTextIsRefusedNamingIt) {
  TempDir dir;
  const std::string weights = dir.file("w.safetensors");
  ASSERT_EQ(run(kTextJob + " --steps 1 --save " + weights).status, 0);
  const CommandResult long_text = run("classify --max-len 4 --weights " + weights + " \"one two three four\"");
  EXPECT_EQ(long_text.status, 1) << long_text.output;
  EXPECT_NE(long_text.output.find("is longer than the maximum length 4"), std::string::npos) << long_text.output;
  std::filesystem::remove(dir.file("w.class_to_idx.json"));
  const CommandResult no_classes = run("classify --weights " + weights + " hello");
  EXPECT_EQ(no_classes.status, 1) << no_classes.output;
  EXPECT_NE(no_classes.output.find(dir.file("w.class_to_idx.json") + ": cannot read the class names"),
            std::string::npos)
      << no_classes.output;
}

}  // namespace
}  // namespace dpcore::testing
