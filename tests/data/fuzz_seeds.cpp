// Writes the fuzzers' seed inputs: small valid files of each format (raw and gzip), from
// which libFuzzer mutates towards the broken ones. Usage: dpcore_fuzz_seeds OUTDIR
#include <cstdio>
#include <filesystem>
#include <string>

#include "data_files.h"

using namespace dpcore::testing;

// fuzz_idx's input: uint16 length of the images file, the images file, the labels file.
static Bytes idx_pair(const Bytes& images, const Bytes& labels) {
  Bytes out = {uint8_t(images.size()), uint8_t(images.size() >> 8)};
  out.insert(out.end(), images.begin(), images.end());
  out.insert(out.end(), labels.begin(), labels.end());
  return out;
}

static void write_idx_seeds(const std::string& dir) {
  const Bytes images = idx_bytes(0x00000803, {3, 4, 4}, pattern_bytes(48, 1));
  const Bytes labels = idx_bytes(0x00000801, {3}, {0, 9, 4});
  write_bytes(dir + "/raw", idx_pair(images, labels));
  write_bytes(dir + "/gzip", idx_pair(gzip_bytes(images), gzip_bytes(labels)));
  const Bytes one = idx_bytes(0x00000803, {1, 28, 28}, pattern_bytes(784, 2));
  write_bytes(dir + "/one-28x28", idx_pair(gzip_bytes(one), idx_bytes(0x00000801, {1}, {7})));
}

static void write_cifar10_seeds(const std::string& dir) {
  write_bytes(dir + "/one", cifar10_bytes({3}, pattern_bytes(3072, 0)));
  write_bytes(dir + "/two", cifar10_bytes({9, 0}, pattern_bytes(2 * 3072, 5)));
}

// A safetensors file: little-endian uint64 header length, JSON header, tensor bytes.
static Bytes safetensors_file(const std::string& header, const Bytes& payload) {
  Bytes out;
  for (int i = 0; i < 8; ++i) out.push_back(uint8_t(uint64_t(header.size()) >> (8 * i)));
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

static void write_safetensors_seeds(const std::string& dir) {
  write_bytes(dir + "/two-tensors", safetensors_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                                     R"("b":{"dtype":"I64","shape":[1,1],"data_offsets":[8,16]},)"
                                                     R"("__metadata__":{"format":"pt"}})",
                                                     pattern_bytes(16, 3)));
  write_bytes(dir + "/empty", safetensors_file("{}", {}));
}

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUTDIR\n", argv[0]);
    return 2;
  }
  const std::string out = argv[1];
  for (const char* sub : {"idx", "cifar10", "safetensors"}) std::filesystem::create_directories(out + "/" + sub);
  write_idx_seeds(out + "/idx");
  write_cifar10_seeds(out + "/cifar10");
  write_safetensors_seeds(out + "/safetensors");
  return 0;
}
