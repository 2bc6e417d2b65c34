#include "train/checkpoints/checkpoint.h"

#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <vector>

#include "engine/io/safetensors.h"
#include "layers/weights.h"

namespace dpcore::train {

namespace {

constexpr const char* kFormat = "dpcore-checkpoint-2";
constexpr const char* kModelPrefix = "model.";          // + the state_dict name
constexpr const char* kOptimizerPrefix = "optimizer.";  // + the state tensor's name (Optimizer::state)

uint32_t crc_of(const std::vector<std::pair<const void*, size_t>>& blocks) {
  uLong crc = crc32(0L, Z_NULL, 0);
  for (auto [data, bytes] : blocks) {
    const Bytef* p = static_cast<const Bytef*>(data);
    for (size_t done = 0; done < bytes;) {  // crc32 takes a uInt length
      uInt chunk = uInt(std::min<size_t>(bytes - done, 1u << 30));
      crc = crc32(crc, p + done, chunk);
      done += chunk;
    }
  }
  return uint32_t(crc);
}

int64_t meta_int(const io::SafetensorsFile& f, const std::string& key) {
  auto it = f.metadata().find(key);
  DPCORE_CHECK(it != f.metadata().end(), f.source(), ": checkpoint metadata lacks '", key, "'");
  try {
    return std::stoll(it->second);
  } catch (const std::exception&) {
    fail(f.source(), ": checkpoint metadata '", key, "' is not a number: '", it->second, "'");
  }
}

// "[exp_avg, exp_avg_sq]", "[]".
std::string listed(const std::vector<std::string>& names) {
  std::string text;
  for (const std::string& n : names) text += (text.empty() ? "" : ", ") + n;
  return "[" + text + "]";
}

}  // namespace

void write_checkpoint(const std::string& path, const Model& model, const Optimizer& optimizer, const TrainProgress& progress,
                      const std::map<std::string, std::string>& settings) {
  std::error_code ec;
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  if (!dir.empty()) std::filesystem::create_directories(dir, ec);
  DPCORE_CHECK(!ec, "checkpoint: cannot create directory ", dir.string(), ": ", ec.message());

  layers::HostState state(model, kModelPrefix);
  std::vector<OptimizerState> optimizer_state = optimizer.state();
  for (OptimizerState& s : optimizer_state) s.tensor = s.tensor.to(Device::cpu());
  std::vector<io::TensorView> views = state.views();
  std::vector<std::pair<const void*, size_t>> blocks;
  for (const io::TensorView& v : views) blocks.emplace_back(v.data, v.bytes);
  for (const OptimizerState& s : optimizer_state) {
    const Tensor& t = s.tensor;
    views.push_back({kOptimizerPrefix + s.name, t.dtype(), t.shape(), t.raw_data(), t.nbytes()});
    blocks.emplace_back(t.raw_data(), t.nbytes());
  }
  std::map<std::string, std::string> meta = settings;
  meta["format"] = kFormat;
  meta["step"] = std::to_string(progress.step);
  meta["epoch"] = std::to_string(progress.position.epoch);
  meta["batch"] = std::to_string(progress.position.batch);
  meta["optimizer_steps"] = std::to_string(optimizer.steps_taken());
  meta["crc32"] = std::to_string(crc_of(blocks));
  io::save_safetensors(path, views, meta);
}

io::SafetensorsFile read_checkpoint(const std::string& path) {
  DPCORE_CHECK(std::filesystem::exists(path), path, ": no such file");
  io::SafetensorsFile file = io::load_safetensors(path);
  auto fmt = file.metadata().find("format");
  DPCORE_CHECK(is_checkpoint(file), path, ": not a dpcore checkpoint (format ",
               fmt == file.metadata().end() ? "missing" : "'" + fmt->second + "'", ")");
  std::vector<std::pair<const void*, size_t>> blocks;
  for (const auto& t : file.tensors()) blocks.emplace_back(t.data.data(), t.data.size());
  auto crc = file.metadata().find("crc32");
  DPCORE_CHECK(crc != file.metadata().end() && std::to_string(crc_of(blocks)) == crc->second, path,
               ": checkpoint is damaged (CRC-32 of its tensors does not match)");
  return file;
}

bool is_checkpoint(const io::SafetensorsFile& file) {
  auto fmt = file.metadata().find("format");
  return fmt != file.metadata().end() && fmt->second == kFormat;
}

TrainProgress checkpoint_progress(const io::SafetensorsFile& file) {
  TrainProgress p;
  p.step = meta_int(file, "step");
  p.position = {meta_int(file, "epoch"), meta_int(file, "batch")};
  return p;
}

void restore_checkpoint(const io::SafetensorsFile& file, Model& model, Optimizer& optimizer) {
  layers::load_weights(model, file, kModelPrefix);
  std::vector<std::string> held, wanted;  // the optimizer's state tensors in the file, and this run's
  for (const io::TensorRecord& t : file.tensors()) {
    if (t.name.rfind(kOptimizerPrefix, 0) == 0) held.push_back(t.name.substr(std::strlen(kOptimizerPrefix)));
  }
  for (const OptimizerState& s : optimizer.state()) wanted.push_back(s.name);
  std::sort(held.begin(), held.end());
  std::vector<std::string> sorted_wanted = wanted;
  std::sort(sorted_wanted.begin(), sorted_wanted.end());
  DPCORE_CHECK(held == sorted_wanted, file.source(), ": the checkpoint holds optimizer state ", listed(held),
               " but this run's ", optimizer.name(), " optimizer has ", listed(wanted),
               " (SGD keeps a momentum buffer when --momentum > 0; Adam and AdamW keep exp_avg and exp_avg_sq)");
  std::vector<Tensor> tensors;
  for (const std::string& name : wanted) {
    const io::TensorRecord* r = file.find(kOptimizerPrefix + name);
    tensors.push_back(Tensor::from_host(r->data.data(), r->shape, r->dtype));
  }
  optimizer.restore(tensors, meta_int(file, "optimizer_steps"));
}

}  // namespace dpcore::train
