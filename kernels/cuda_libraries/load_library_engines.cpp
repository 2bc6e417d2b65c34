// Loads the library engines' module (library_engines.h) on first use: dlopen of
// libdpcore_cuda_libraries.so from the folder libdpcore itself was loaded from (the build
// folder, or the installed lib folder), then its entry point. Also the runtime's
// prepare_library_handles (kernels/cuda_runtime/library_preparation.h), which asks the
// module for a stream's handles.
#include <dlfcn.h>

#include <string>

#include "kernels/cuda_libraries/library_engines.h"
#include "kernels/cuda_runtime/library_preparation.h"
#include "kernels/error.h"

namespace dpcore::kernels::cuda_libraries {

namespace {

constexpr const char* kModule = "libdpcore_cuda_libraries.so";

// The folder of the object this function is in: libdpcore's.
std::string own_folder() {
  Dl_info info{};
  DPCORE_CHECK(dladdr(reinterpret_cast<void*>(&own_folder), &info) != 0 && info.dli_fname,
               "cuDNN/cuBLAS engines: cannot tell where libdpcore was loaded from (dladdr failed)");
  const std::string path = info.dli_fname;
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

const LibraryEngines* load() {
  const std::string path = own_folder() + "/" + kModule;
  // RTLD_NODELETE: the engines' functions and handles live until the process ends.
  void* module = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  DPCORE_CHECK(module, "cuDNN/cuBLAS engines: cannot load ", path, ": ", dlerror(),
               " (this build has the NVIDIA libraries; the module is built and installed beside libdpcore)");
  using Entry = const LibraryEngines* (*)();
  auto entry = reinterpret_cast<Entry>(dlsym(module, "dpcore_cuda_library_engines"));
  DPCORE_CHECK(entry, "cuDNN/cuBLAS engines: ", path, " has no dpcore_cuda_library_engines: ", dlerror());
  return entry();
}

}  // namespace

bool library_engines_in_build() { return true; }

const LibraryEngines* library_engines() {
  static const LibraryEngines* engines = load();  // C++ makes the first call's load thread-safe
  return engines;
}

}  // namespace dpcore::kernels::cuda_libraries

namespace dpcore::kernels::cuda_runtime {

void prepare_library_handles(int device, cudaStream_t stream) {
  cuda_libraries::library_engines()->prepare_handles(device, stream);
}

}  // namespace dpcore::kernels::cuda_runtime
