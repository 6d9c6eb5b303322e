// auto: the lab's fast entry, torch.ops.lab.softmax. Not a kernel of its own: each call is handed
// to the lab's fastest CUDA variant for its (dtype, N, M).
// Tuned production kernel entry (cuda.auto, a dispatcher). Launch table: the dispatch table of the device's GPU
// model (lab/tables/<gpu>.json, installed at import by lab/dispatch.py: set_auto_table), then two rules for ragged
// rows (kOddRowsManyRows, kTilesRule). Measurements behind the rules: notebook/auto-dispatch-rules/.
//
// Algorithm: an entry covers rows of at most max_cols elements and, among the entries of one max_cols, at most
// max_rows rows (the last of them takes any more rows). Without a table, or for a dtype the table has no entry
// for, the default rule applies:
//   rows of at most 8192 (float32) or 2048 (16-bit) elements -> register_cached (default_choice)
//   longer rows -> cluster on sm_90 or newer (thread-block clusters), online elsewhere
// (register_cached's one-row-per-warp-group layout wins up to those lengths and the cluster split above them;
// without clusters, online is the one variant that takes any N).
// Ragged rows (odd N: rows off 16-byte boundaries, or N not a multiple of a pack), the odd-rows rule: the table is
// measured on aligned rows. Where it (or the default rule) names cluster, register_cached takes ragged rows it
// holds (N <= 16384) instead, on its PEELED kernels (one read), where
//   - register_cached takes them on the entry below N's (N a few elements past an entry's end: its whole packs
//     fit that entry; register_cached_ragged), or
//   - cluster would take them on its streaming path (two reads of every element), or
//   - the rows are 16-bit, N is within a pack of the end of its entry in cluster's aligned table (the shifted row
//     crosses it: 2^k - 1; cluster_detour), and there are at least kOddRowsManyRows rows.
// Short ragged rows, the tiles rule: where the table (or the default rule) names register_cached, tiled_rows takes
// contiguous ragged rows (x and y rows N apart, N not a multiple of a pack or x off a 16-byte boundary) that are
//   - float32 rows of at most 64 elements, at least 131072 of them, or
//   - 16-bit rows of at most 32 elements, at least 32768 of them, or of 33 to 64 elements, at least 131072
// (kTilesRule). float16 takes bfloat16's rule (the same kernels).
// HBM sweeps: those of the chosen variant.
// Launch: the chosen variant's launcher, on the caller's stream; the lookup is host work on every call.
// Why:
// - Odd-rows rule: on the entry below N's register_cached was ahead at every M measured (bfloat16 4097 and 8193 by
//   10-35%); cluster's streaming path reads twice (bfloat16 4096x8191: 72.7 us against 42.0); at crossing lengths
//   register_cached stays ahead in 16 bits (bfloat16 8191: 94.4% of a copy against 74.5) but not in float32.
// - Tiles rule: register_cached peels such rows one by one, mostly edges held element by element; tiled_rows moves
//   a tile of consecutive rows as whole 16-byte packs (bfloat16 N = 31: 92% of a copy against 51 at 524288 rows).
//   Fewer rows are left to the table: there tiled_rows was behind or level.
// Limits: those of the chosen variant.
#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "lab/check.cuh"
#include "lab/launch.h"
#include "lab/tune.h"
#include "lab/variants.h"

namespace lab {

#define LAB_DECLARE(name) cudaError_t softmax_##name(const RowsArgs& args, cudaStream_t stream);
LAB_SOFTMAX_VARIANTS(LAB_DECLARE)
#undef LAB_DECLARE

namespace {

#define LAB_LAUNCHER_ENTRY(name) {#name, &softmax_##name},
struct NamedLauncher {
  const char* name;
  RowsLauncher launch;
};
constexpr NamedLauncher kVariants[] = {LAB_SOFTMAX_VARIANTS(LAB_LAUNCHER_ENTRY)};
#undef LAB_LAUNCHER_ENTRY
constexpr int kVariantCount = sizeof(kVariants) / sizeof(NamedLauncher);

struct Entry {
  DType dtype;
  int64_t max_cols;
  int64_t max_rows;
  int variant;  // index into kVariants
};

// One table per GPU model (by its name, e.g. "NVIDIA H200"), each sorted by (dtype, max_cols,
// max_rows) by set_auto_table; a call uses the table of its device's model.
std::mutex table_mutex;
std::map<std::string, std::vector<Entry>> tables;

// The current device's name ("" without one), looked up once per device.
std::string current_gpu() {
  static std::mutex mutex;
  static std::map<int, std::string> names;
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    (void)cudaGetLastError();
    return "";
  }
  const std::lock_guard<std::mutex> lock(mutex);
  auto it = names.find(device);
  if (it == names.end()) {
    cudaDeviceProp prop{};
    std::string name;
    if (cudaGetDeviceProperties(&prop, device) == cudaSuccess) {
      name = prop.name;
    } else {
      (void)cudaGetLastError();
    }
    it = names.emplace(device, name).first;
  }
  return it->second;
}

int index_of(const char* name) {
  for (int i = 0; i < kVariantCount; ++i) {
    if (std::string(kVariants[i].name) == name) return i;
  }
  return -1;
}

// major: the compute capability's major version the rule is for (-1: the current device's; none: below 9).
int default_choice(int64_t cols, DType dtype, int major) {
  const int64_t short_rows = dtype == DType::kFloat32 ? 8192 : 2048;
  if (cols <= short_rows) return index_of("register_cached");
  if (major < 0) {
    int device = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) {
      (void)cudaGetLastError();
      return index_of("online");
    }
  }
  return index_of(major >= 9 ? "cluster" : "online");
}

// gpu: the model whose table is read; major: as default_choice's (a launch passes the current device's, -1).
int choose(int64_t rows, int64_t cols, DType dtype, bool* from_table, const std::string& gpu, int major) {
  {
    const std::lock_guard<std::mutex> lock(table_mutex);
    const auto found = tables.find(gpu);
    // A reference to the table itself: a conditional between it and a temporary would copy it into a
    // temporary that dies with the loop, leaving group_last dangling.
    static const std::vector<Entry> kNoTable;
    const std::vector<Entry>& table = found == tables.end() ? kNoTable : found->second;
    const Entry* group_last = nullptr;
    for (const Entry& e : table) {
      if (e.dtype != dtype || cols > e.max_cols) continue;
      if (group_last && group_last->max_cols != e.max_cols) break;  // past the group that covers cols
      group_last = &e;
      if (rows <= e.max_rows) break;
    }
    if (group_last) {
      *from_table = true;
      return group_last->variant;
    }
  }
  *from_table = false;
  return default_choice(cols, dtype, major);
}

// The rows from which register_cached takes ragged rows whose shifted row crosses the end of N's entry in cluster's
// aligned table (the header): it needs rows enough to fill the GPU (float32 16383 against cluster on one more CTA
// per row: level at 132 rows, 15-20% behind at 32 and fewer).
constexpr int64_t kOddRowsManyRows = 128;

// The odd-rows rule (see the header): where chosen `v` is cluster and the rows are ragged, the reason register_cached
// takes them instead (register_cached's index in *v), else nullptr (v unchanged). detour() gives cluster_detour's
// answer for the rows, asked only where the rule gets that far (its plan lookups are host work on every call).
template <typename Detour>
const char* odd_rows_rule(int* v, int64_t rows, int64_t cols, DType dtype, bool ragged, Detour&& detour) {
  static const int cluster = index_of("cluster"), register_cached = index_of("register_cached");
  if (*v != cluster || !ragged || cols > kRegisterCachedMaxCols) return nullptr;
  int64_t entry_cols = 0;
  const char* why = nullptr;
  if (register_cached_ragged(cols, dtype, &entry_cols) && entry_cols < cols) {
    why = "entry below N";
  } else {
    const ClusterDetour d = detour();
    if (d == ClusterDetour::kStreaming) {
      why = "cluster streams";
    } else if (d == ClusterDetour::kCrossing && dtype != DType::kFloat32 && rows >= kOddRowsManyRows) {
      why = "cluster crosses an entry";
    }
  }
  if (why) *v = register_cached;
  return why;
}

// The tiles rule (see the header): where chosen `v` is register_cached and the rows are contiguous and ragged, the
// reason tiled_rows takes them instead (its index in *v), else nullptr (v unchanged). kTilesRule: per dtype class,
// the first entry whose max_cols covers N says from how many rows tiled_rows takes them; past the last, none.
constexpr int64_t kTiledMaxCols = 64;  // the longest rows the rule gives tiled_rows, in any dtype
struct TilesEntry {
  bool float32;
  int64_t max_cols;
  int64_t min_rows;
};
constexpr TilesEntry kTilesRule[] = {
    {true, kTiledMaxCols, 131072}, {false, 32, 32768}, {false, kTiledMaxCols, 131072},
};
const char* tiles_rule(int* v, int64_t rows, int64_t cols, DType dtype, bool contiguous_ragged) {
  static const int register_cached = index_of("register_cached"), tiled_rows = index_of("tiled_rows");
  if (*v != register_cached || tiled_rows < 0 || !contiguous_ragged) return nullptr;
  const bool f32 = dtype == DType::kFloat32;
  for (const TilesEntry& e : kTilesRule) {
    if (e.float32 != f32 || cols > e.max_cols) continue;
    if (rows < e.min_rows) return nullptr;
    *v = tiled_rows;
    return "short rows in tiles";
  }
  return nullptr;
}

}  // namespace

cudaError_t softmax_auto(const RowsArgs& a, cudaStream_t stream) {
  bool from_table = false;
  int v = choose(a.rows, a.cols, a.dtype, &from_table, current_gpu(), -1);
  if (v < 0) return cudaErrorInvalidValue;
  if (kVariants[v].launch == &softmax_cluster) {
    odd_rows_rule(&v, a.rows, a.cols, a.dtype, register_cached_rows_ragged(a), [&] { return cluster_detour(a); });
  }
  if (a.cols <= kTiledMaxCols) {
    const bool contiguous = a.x_row_stride == a.cols && a.y_row_stride == a.cols;  // the rule wants many rows
    tiles_rule(&v, a.rows, a.cols, a.dtype, contiguous && register_cached_rows_ragged(a));
  }
  return kVariants[v].launch(a, stream);
}

bool set_auto_table(const std::string& gpu, const std::vector<std::string>& names, const std::vector<int64_t>& flat,
                    std::string* error) {
  if (flat.size() % 4 != 0) {
    *error = "the table is a flat list of (dtype, max_cols, max_rows, variant index) quadruples";
    return false;
  }
  std::vector<Entry> entries;
  for (size_t i = 0; i < flat.size(); i += 4) {
    const int64_t dtype = flat[i], variant = flat[i + 3];
    if (dtype < 0 || dtype > static_cast<int64_t>(DType::kBFloat16) || variant < 0 ||
        variant >= static_cast<int64_t>(names.size())) {
      *error = "entry " + std::to_string(i / 4) + ": dtype or variant index out of range";
      return false;
    }
    const int index = index_of(names[variant].c_str());
    if (index < 0) {
      *error = "entry " + std::to_string(i / 4) + ": no CUDA variant named '" + names[variant] + "'";
      return false;
    }
    entries.push_back({static_cast<DType>(dtype), flat[i + 1], flat[i + 2], index});
  }
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    if (a.dtype != b.dtype) return a.dtype < b.dtype;
    if (a.max_cols != b.max_cols) return a.max_cols < b.max_cols;
    return a.max_rows < b.max_rows;
  });
  const std::lock_guard<std::mutex> lock(table_mutex);
  if (entries.empty()) {
    tables.erase(gpu);
  } else {
    tables[gpu] = std::move(entries);
  }
  return true;
}

std::string auto_choice(int64_t rows, int64_t cols, DType dtype, bool aligned, bool* from_table,
                        std::string* odd_rows, const std::string& gpu, int major) {
  int v = choose(rows, cols, dtype, from_table, gpu.empty() ? current_gpu() : gpu, gpu.empty() ? -1 : major);
  if (v < 0) return std::string();
  const char* why =
      odd_rows_rule(&v, rows, cols, dtype, !aligned, [&] { return cluster_detour(cols, rows, dtype, aligned); });
  if (!why) why = tiles_rule(&v, rows, cols, dtype, !aligned);  // a contiguous input, rows and output
  *odd_rows = why ? why : "";
  return std::string(kVariants[v].name);
}

}  // namespace lab
