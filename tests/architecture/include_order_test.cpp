// The layer order of the source tree (docs/architecture.md), enforced: every quoted
// #include in kernels/, engine/, layers/, comm/, train/ and cli/ must name a file that
// exists (as a path from the repository root) and must point down the layer order, never
// up. The rule table below is the one place the order is written down.
//
// Angle-bracket includes are system and library headers and are not checked. tests/,
// bench/, docs/examples/ and cmake/ may include anything and are not walked. A quoted
// include is found by a regex on each line, so one inside #if 0 counts too.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace dpcore::architecture {
namespace {

namespace fs = std::filesystem;

// ---------------------------------------------------------------------------
// The rule table
// ---------------------------------------------------------------------------
//
// One row per area. `folder` is a path from the repository root; a file belongs to the row
// with the longest matching folder (kernels/cpu/gemm.cpp is in "kernels/cpu", not in
// "kernels"). A row with `subfolders = false` holds only the files directly in its folder:
// a file in a subfolder no row names (kernels/foo/x.cpp) is itself reported, so a new
// folder has to be given its place here before it can hold code.
//
// A file may include a file of another area when that area's layer is lower, or when both
// are in the same layer and the other area's rank within the layer is lower. Areas with
// the same layer and the same rank (kernels/naive, kernels/cpu, kernels/cuda_runtime) do
// not include one another.
struct Area {
  const char* folder;
  int layer;
  int rank;         // order within the layer; only kernels/ has more than one rank
  bool subfolders;  // whether files in subfolders of `folder` belong to this area
};

constexpr Area kAreas[] = {
    // layer 0: kernels/*.h < naive, cpu, cuda_runtime < cuda < cuda_libraries
    {"kernels", 0, 0, false},  // error.h, shapes.h
    {"kernels/naive", 0, 1, true},
    {"kernels/cpu", 0, 1, true},
    {"kernels/cuda_runtime", 0, 1, true},
    {"kernels/cuda", 0, 2, true},
    {"kernels/cuda_libraries", 0, 3, true},
    // layers 1-5: each folder (with its subfolders: engine/ops, engine/data, engine/io, train/step,
    // train/runners, ...) is one area
    {"engine", 1, 0, true},
    {"layers", 2, 0, true},
    {"comm", 3, 0, true},
    {"train", 4, 0, true},
    {"cli", 5, 0, true},
};

// The layers' top folders, by layer number; they are walked in this order.
constexpr const char* kLayerFolders[] = {"kernels", "engine", "layers", "comm", "train", "cli"};
constexpr const char* kKernelsSubOrder = "kernels/*.h < naive, cpu, cuda_runtime < cuda < cuda_libraries";

// ---------------------------------------------------------------------------
// The checker
// ---------------------------------------------------------------------------

struct Violation {
  std::string file;     // path from the root, '/'-separated
  int line = 0;         // 1-based
  std::string include;  // as written between the quotes
  std::string rule;     // which rule it breaks, in words

  std::string message() const {
    std::ostringstream out;
    out << file << ":" << line << " includes " << include << ": " << rule;
    return out.str();
  }
};

struct Report {
  std::vector<Violation> violations;
  int files_checked = 0;
  int includes_checked = 0;
};

bool is_source(const fs::path& p) {
  const std::string ext = p.extension().string();
  return ext == ".h" || ext == ".cpp" || ext == ".cu" || ext == ".cuh";
}

bool starts_with_folder(const std::string& path, const std::string& folder) {
  return path.size() > folder.size() && path.compare(0, folder.size(), folder) == 0 && path[folder.size()] == '/';
}

// The area a root-relative file path belongs to, or nullopt if no row claims it.
std::optional<Area> area_of(const std::string& path) {
  const Area* best = nullptr;
  for (const Area& a : kAreas) {
    const std::string folder = a.folder;
    if (!starts_with_folder(path, folder)) continue;
    const bool direct = path.find('/', folder.size() + 1) == std::string::npos;
    if (!direct && !a.subfolders) continue;
    if (best == nullptr || folder.size() > std::string(best->folder).size()) best = &a;
  }
  if (best == nullptr) return std::nullopt;
  return *best;
}

std::string describe(const Area& a) {
  if (a.layer == 0 && a.rank == 0) return "kernels/*.h";
  return a.folder;
}

// Why `from` may not include `to`, or "" when it may.
std::string broken_rule(const Area& from, const Area& to) {
  if (to.layer < from.layer) return "";
  if (to.layer > from.layer) {
    std::ostringstream out;
    out << kLayerFolders[from.layer] << " (layer " << from.layer << ") may not include " << kLayerFolders[to.layer]
        << " (layer " << to.layer << ")";
    return out.str();
  }
  if (std::string(to.folder) == from.folder || to.rank < from.rank) return "";
  std::ostringstream out;
  out << describe(from) << " may not include " << describe(to) << " (order within kernels: " << kKernelsSubOrder << ")";
  return out.str();
}

// Checks every source file under root's layer folders.
Report check_tree(const fs::path& root) {
  static const std::regex include_line(R"re(^\s*#\s*include\s*"([^"]+)")re");
  Report report;
  std::vector<fs::path> files;
  for (const char* top : kLayerFolders) {
    const fs::path dir = root / top;
    if (!fs::is_directory(dir)) continue;
    for (const auto& entry : fs::recursive_directory_iterator(dir)) {
      if (entry.is_regular_file() && is_source(entry.path())) files.push_back(entry.path());
    }
  }
  std::sort(files.begin(), files.end());

  for (const fs::path& file : files) {
    const std::string rel = fs::relative(file, root).generic_string();
    ++report.files_checked;
    const std::optional<Area> from = area_of(rel);
    std::ifstream in(file);
    std::string text;
    int line_no = 0;
    bool reported_area = false;
    while (std::getline(in, text)) {
      ++line_no;
      std::smatch m;
      if (!std::regex_search(text, m, include_line)) continue;
      ++report.includes_checked;
      const std::string inc = m[1].str();
      if (!fs::is_regular_file(root / inc)) {
        report.violations.push_back(
            {rel, line_no, inc, "no such file (quoted includes are paths from the repository root)"});
        continue;
      }
      if (!from) {
        if (!reported_area) {
          report.violations.push_back(
              {rel, line_no, inc,
               "the file's folder has no row in the rule table of tests/architecture/include_order_test.cpp"});
          reported_area = true;
        }
        continue;
      }
      const std::optional<Area> to = area_of(inc);
      if (!to) {
        report.violations.push_back({rel, line_no, inc,
                                     std::string(kLayerFolders[from->layer]) + " (layer " + std::to_string(from->layer) +
                                         ") may include only kernels, engine, layers, comm, train, cli"});
        continue;
      }
      const std::string rule = broken_rule(*from, *to);
      if (!rule.empty()) report.violations.push_back({rel, line_no, inc, rule});
    }
  }
  return report;
}

// ---------------------------------------------------------------------------
// The tests
// ---------------------------------------------------------------------------

// Every test is in the suite "architecture", so that `ctest -R architecture` selects them
// (ctest sees the GoogleTest names, not the executable's).

fs::path source_dir() {
  const char* dir = std::getenv("DPCORE_SOURCE_DIR");
  return dir != nullptr ? fs::path(dir) : fs::path("..");
}

TEST(architecture, SourceTreeKeepsTheLayerOrder) {
  const fs::path root = source_dir();
  ASSERT_TRUE(fs::is_regular_file(root / "kernels/error.h"))
      << "DPCORE_SOURCE_DIR=" << root << " is not the dpcore tree";
  const Report report = check_tree(root);
  // A checker that sees nothing passes everything: make sure it read the tree.
  EXPECT_GT(report.files_checked, 50);
  EXPECT_GT(report.includes_checked, 100);
  for (const Violation& v : report.violations) ADD_FAILURE() << v.message();
  EXPECT_TRUE(report.violations.empty()) << report.violations.size()
                                         << " include(s) break the layer order; see docs/architecture.md";
}

// A small tree in a temporary folder, removed again when the test ends.
class TempTree {
 public:
  TempTree() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    root_ = fs::temp_directory_path() /
            (std::string("dpcore_include_order_") + info->name() + "_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  ~TempTree() {
    std::error_code ignored;
    fs::remove_all(root_, ignored);
  }
  TempTree(const TempTree&) = delete;
  TempTree& operator=(const TempTree&) = delete;

  const fs::path& root() const { return root_; }

  void write(const std::string& rel, const std::string& text) {
    fs::create_directories((root_ / rel).parent_path());
    std::ofstream(root_ / rel) << text;
  }

  // A tree that keeps every rule.
  void write_clean_tree() {
    write("kernels/error.h", "#pragma once\n#include <string>\n");
    write("kernels/shapes.h", "#pragma once\n");
    write("kernels/naive/relu.cpp", "#include \"kernels/shapes.h\"\n");
    write("kernels/cpu/relu.cpp", "#include \"kernels/error.h\"\n#include \"kernels/shapes.h\"\n");
    write("kernels/cuda_runtime/stream.h", "#pragma once\n#include \"kernels/error.h\"\n");
    write("kernels/cuda/launch.cuh", "#pragma once\n#include \"kernels/cuda_runtime/stream.h\"\n");
    write("kernels/cuda_libraries/dispatch.cu", "#include \"kernels/cuda/launch.cuh\"\n");
    write("engine/tensor.h", "#pragma once\n#include \"kernels/shapes.h\"\n");
    write("engine/ops/relu.cpp", "#include \"engine/tensor.h\"\n#include \"kernels/cpu/relu.cpp\"\n");
    write("layers/module.h", "#pragma once\n#include \"engine/tensor.h\"\n");
    write("comm/communicator.h", "#pragma once\n#include \"engine/tensor.h\"\n");
    write("train/step/step.h", "#pragma once\n#include \"layers/module.h\"\n#include \"comm/communicator.h\"\n");
    write("cli/main.cpp", "#include \"train/step/step.h\"\n#include <vector>\n");
    // Outside the layers anything goes.
    write("tests/anything_test.cpp", "#include \"cli/main.cpp\"\n#include \"does/not/exist.h\"\n");
  }

 private:
  fs::path root_;
};

std::vector<std::string> messages(const Report& r) {
  std::vector<std::string> out;
  for (const Violation& v : r.violations) out.push_back(v.message());
  return out;
}

TEST(architecture, CheckerCleanTreePasses) {
  TempTree tree;
  tree.write_clean_tree();
  const Report r = check_tree(tree.root());
  EXPECT_EQ(r.files_checked, 13);  // every file in the six folders, none in tests/
  EXPECT_TRUE(r.violations.empty()) << ::testing::PrintToString(messages(r));
}

TEST(architecture, CheckerWrongWayIncludeIsReportedWithFileLineAndInclude) {
  TempTree tree;
  tree.write_clean_tree();
  tree.write("kernels/cpu/relu.cpp", "#include \"kernels/error.h\"\n\n#include \"train/step/step.h\"\n");
  const Report r = check_tree(tree.root());
  ASSERT_EQ(r.violations.size(), 1u) << ::testing::PrintToString(messages(r));
  const Violation& v = r.violations[0];
  EXPECT_EQ(v.file, "kernels/cpu/relu.cpp");
  EXPECT_EQ(v.line, 3);
  EXPECT_EQ(v.include, "train/step/step.h");
  EXPECT_EQ(v.message(),
            "kernels/cpu/relu.cpp:3 includes train/step/step.h: kernels (layer 0) may not include train (layer 4)");
}

TEST(architecture, CheckerKernelsSubOrderIsEnforced) {
  TempTree tree;
  tree.write_clean_tree();
  tree.write("kernels/cuda_runtime/graph.cu", "#include \"kernels/cuda/launch.cuh\"\n");  // runtime -> cuda: up
  tree.write("kernels/cpu/gemm.cpp", "#include \"kernels/cuda_runtime/stream.h\"\n");  // cpu -> cuda_runtime: sibling
  tree.write("kernels/naive/gemm.cpp", "  # include \"kernels/cpu/relu.cpp\"\n");      // naive -> cpu: sibling
  tree.write("kernels/error.cpp", "#include \"kernels/naive/relu.cpp\"\n");            // kernels/*.h -> naive: up
  tree.write("kernels/cuda/gemm.cu",
             "#include \"kernels/cuda_libraries/dispatch.cu\"\n");  // cuda -> cuda_libraries: up
  const Report r = check_tree(tree.root());
  std::vector<std::string> got = messages(r);
  std::sort(got.begin(), got.end());
  const std::string order = " (order within kernels: kernels/*.h < naive, cpu, cuda_runtime < cuda < cuda_libraries)";
  const std::vector<std::string> want = {
      "kernels/cpu/gemm.cpp:1 includes kernels/cuda_runtime/stream.h: kernels/cpu may not include "
      "kernels/cuda_runtime" +
          order,
      "kernels/cuda/gemm.cu:1 includes kernels/cuda_libraries/dispatch.cu: kernels/cuda may not include "
      "kernels/cuda_libraries" +
          order,
      "kernels/cuda_runtime/graph.cu:1 includes kernels/cuda/launch.cuh: kernels/cuda_runtime may not include "
      "kernels/cuda" +
          order,
      "kernels/error.cpp:1 includes kernels/naive/relu.cpp: kernels/*.h may not include kernels/naive" + order,
      "kernels/naive/gemm.cpp:1 includes kernels/cpu/relu.cpp: kernels/naive may not include kernels/cpu" + order,
  };
  EXPECT_EQ(got, want);
}

TEST(architecture, CheckerMissingFileAndUnknownFoldersAreReported) {
  TempTree tree;
  tree.write_clean_tree();
  tree.write("engine/ops/conv2d.cpp", "#include \"engine/tensor.h\"\n#include \"engine/ops.h\"\n");  // no such file
  tree.write("layers/zoo.cpp", "#include \"tests/support/helper.h\"\n");  // outside the layers
  tree.write("tests/support/helper.h", "#pragma once\n");
  tree.write("kernels/extra/thing.cpp", "#include \"kernels/error.h\"\n");  // folder not in the table
  const Report r = check_tree(tree.root());
  std::vector<std::string> got = messages(r);
  std::sort(got.begin(), got.end());
  const std::vector<std::string> want = {
      "engine/ops/conv2d.cpp:2 includes engine/ops.h: no such file (quoted includes are paths from the repository "
      "root)",
      "kernels/extra/thing.cpp:1 includes kernels/error.h: the file's folder has no row in the rule table of "
      "tests/architecture/include_order_test.cpp",
      "layers/zoo.cpp:1 includes tests/support/helper.h: layers (layer 2) may include only kernels, engine, layers, "
      "comm, "
      "train, cli",
  };
  EXPECT_EQ(got, want);
}

TEST(architecture, CheckerEveryLayerMayIncludeEveryLowerOneButNoHigherOne) {
  // The full 6x6 matrix of top-level layers: a probe file in each includes one file of each.
  TempTree tree;
  tree.write_clean_tree();
  const char* file_of[] = {"kernels/shapes.h",    "engine/tensor.h", "layers/module.h",
                           "comm/communicator.h", "train/step/step.h",    "cli/main.cpp"};
  const char* probe_of[] = {"kernels/cpu/probe.cpp", "engine/ops/probe.cpp", "layers/probe.cpp",
                            "comm/probe.cpp",        "train/probe.cpp",      "cli/probe.cpp"};
  for (int from = 0; from < 6; ++from) {
    std::string text;
    for (int to = 0; to < 6; ++to) text += std::string("#include \"") + file_of[to] + "\"\n";
    tree.write(probe_of[from], text);
  }
  const Report r = check_tree(tree.root());
  std::vector<std::string> want;
  for (int from = 0; from < 6; ++from) {
    for (int to = from + 1; to < 6; ++to) {
      want.push_back(std::string(probe_of[from]) + ":" + std::to_string(to + 1) + " includes " + file_of[to] + ": " +
                     kLayerFolders[from] + " (layer " + std::to_string(from) + ") may not include " + kLayerFolders[to] +
                     " (layer " + std::to_string(to) + ")");
    }
  }
  std::vector<std::string> got = messages(r);
  std::sort(got.begin(), got.end());
  std::sort(want.begin(), want.end());
  EXPECT_EQ(got, want);
}

}  // namespace
}  // namespace dpcore::architecture
