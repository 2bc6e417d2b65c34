#include "train/checkpoint.h"

#include <zlib.h>

#include <filesystem>
#include <vector>

#include "engine/io/safetensors.h"
#include "layers/weights.h"

namespace dpcore::train {

namespace {

constexpr const char* kFormat = "dpcore-checkpoint-2";
constexpr const char* kModelPrefix = "model.";  // + the state_dict name

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

}  // namespace

void write_checkpoint(const std::string& path, const Model& model, const Sgd& sgd, const TrainProgress& progress,
                      const std::map<std::string, std::string>& settings) {
  std::error_code ec;
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  if (!dir.empty()) std::filesystem::create_directories(dir, ec);
  DPCORE_CHECK(!ec, "checkpoint: cannot create directory ", dir.string(), ": ", ec.message());

  layers::HostState state(model, kModelPrefix);
  Tensor momentum = sgd.momentum().defined() ? sgd.momentum().to(Device::cpu()) : Tensor();
  std::vector<io::TensorView> views = state.views();
  std::vector<std::pair<const void*, size_t>> blocks;
  for (const io::TensorView& v : views) blocks.emplace_back(v.data, v.bytes);
  if (momentum.defined()) {
    views.push_back({"optimizer.momentum", momentum.dtype(), momentum.shape(), momentum.raw_data(), momentum.nbytes()});
    blocks.emplace_back(momentum.raw_data(), momentum.nbytes());
  }
  std::map<std::string, std::string> meta = settings;
  meta["format"] = kFormat;
  meta["step"] = std::to_string(progress.step);
  meta["epoch"] = std::to_string(progress.position.epoch);
  meta["batch"] = std::to_string(progress.position.batch);
  meta["optimizer_steps"] = std::to_string(sgd.steps_taken());
  meta["crc32"] = std::to_string(crc_of(blocks));
  io::save_safetensors(path, views, meta);
}

io::SafetensorsFile read_checkpoint(const std::string& path) {
  DPCORE_CHECK(std::filesystem::exists(path), path, ": no such file");
  io::SafetensorsFile file = io::load_safetensors(path);
  auto fmt = file.metadata().find("format");
  DPCORE_CHECK(fmt != file.metadata().end() && fmt->second == kFormat, path, ": not a dpcore checkpoint (format ",
               fmt == file.metadata().end() ? "missing" : "'" + fmt->second + "'", ")");
  std::vector<std::pair<const void*, size_t>> blocks;
  for (const auto& t : file.tensors()) blocks.emplace_back(t.data.data(), t.data.size());
  auto crc = file.metadata().find("crc32");
  DPCORE_CHECK(crc != file.metadata().end() && std::to_string(crc_of(blocks)) == crc->second, path,
               ": checkpoint is damaged (CRC-32 of its tensors does not match)");
  return file;
}

TrainProgress checkpoint_progress(const io::SafetensorsFile& file) {
  TrainProgress p;
  p.step = meta_int(file, "step");
  p.position = {meta_int(file, "epoch"), meta_int(file, "batch")};
  return p;
}

void restore_checkpoint(const io::SafetensorsFile& file, Model& model, Sgd& sgd) {
  layers::load_weights(model, file, kModelPrefix);
  const io::TensorRecord* momentum = file.find("optimizer.momentum");
  DPCORE_CHECK((momentum != nullptr) == sgd.momentum().defined(), file.source(), ": optimizer state ",
               momentum ? "has" : "lacks", " a momentum buffer but this run's momentum is ", sgd.config().momentum);
  Tensor m;
  if (momentum) m = Tensor::from_host(momentum->data.data(), momentum->shape, momentum->dtype);
  sgd.restore(m, meta_int(file, "optimizer_steps"));
}

}  // namespace dpcore::train
