#include "worker/cuda/collective_exchange.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace meshcast::worker::cuda {

absl::StatusOr<GroupLayout> GroupLayout::Create(
    const std::vector<int>& worker_of_rank) {
  if (worker_of_rank.empty()) {
    return absl::InvalidArgumentError("a collective group needs a rank");
  }
  GroupLayout layout;
  for (size_t r = 0; r < worker_of_rank.size(); ++r) {
    const int id = worker_of_rank[r];
    int index = layout.IndexOfId(id);
    if (index < 0) {
      index = layout.m();
      layout.ids_.push_back(id);
      layout.ranks_of_.emplace_back();
    }
    layout.index_of_rank_.push_back(index);
    layout.ranks_of_[index].push_back(static_cast<int>(r));
  }
  return layout;
}

int GroupLayout::IndexOfId(int id) const {
  auto it = std::find(ids_.begin(), ids_.end(), id);
  return it == ids_.end() ? -1 : static_cast<int>(it - ids_.begin());
}

ElementRange AllReducePiece(int64_t elements, int m, int w) {
  const int64_t per = (elements + m - 1) / m;
  return {std::min(elements, w * per), std::min(elements, (w + 1) * per)};
}

ElementRange ReduceScatterChunk(int64_t rows, int64_t row_elements, int n,
                                int r) {
  const int64_t per = (rows + n - 1) / n;
  const int64_t begin = std::min(rows, r * per);
  const int64_t end = std::min(rows, (r + 1) * per);
  return {begin * row_elements, end * row_elements};
}

Exchange AllReduceExchange(const GroupLayout& layout, int me,
                           int64_t elements) {
  const int m = layout.m();
  Exchange x;
  x.groups.resize(2);
  x.reductions.resize(2);
  const ElementRange mine = AllReducePiece(elements, m, me);
  int slot = 0;
  for (int w = 0; w < m; ++w) {
    if (w == me) continue;
    const ElementRange theirs = AllReducePiece(elements, m, w);
    x.groups[0].push_back(
        {true, w, Region::kAccumulator, theirs.begin, theirs.length()});
    const int64_t staging = slot++ * mine.length();
    x.groups[0].push_back(
        {false, w, Region::kStaging, staging, mine.length()});
    x.reductions[0].push_back({staging, mine.begin, mine.length()});
    x.groups[1].push_back(
        {true, w, Region::kAccumulator, mine.begin, mine.length()});
    x.groups[1].push_back(
        {false, w, Region::kAccumulator, theirs.begin, theirs.length()});
  }
  x.staging_elements = static_cast<int64_t>(m - 1) * mine.length();
  return x;
}

Exchange ReduceScatterExchange(const GroupLayout& layout, int me, int64_t rows,
                               int64_t row_elements) {
  const int n = layout.n(), m = layout.m();
  Exchange x;
  x.groups.resize(1);
  x.reductions.resize(1);
  for (int r = 0; r < n; ++r) {
    const int w = layout.WorkerOf(r);
    if (w == me) continue;
    const ElementRange c = ReduceScatterChunk(rows, row_elements, n, r);
    x.groups[0].push_back(
        {true, w, Region::kAccumulator, c.begin, c.length()});
  }
  int64_t staging = 0;
  for (int r : layout.RanksOf(me)) {
    const ElementRange c = ReduceScatterChunk(rows, row_elements, n, r);
    for (int w = 0; w < m; ++w) {
      if (w == me) continue;
      x.groups[0].push_back({false, w, Region::kStaging, staging, c.length()});
      x.reductions[0].push_back({staging, c.begin, c.length()});
      staging += c.length();
    }
  }
  x.staging_elements = staging;
  return x;
}

Exchange AllGatherExchange(const GroupLayout& layout, int me,
                           const std::vector<int64_t>& bundle_elements) {
  const int m = layout.m();
  Exchange x;
  x.groups.resize(1);
  x.reductions.resize(1);
  x.incoming_elements.assign(m, 0);
  x.outgoing_elements.assign(m, 0);
  for (int w = 0; w < m; ++w) {
    if (w == me) continue;
    x.groups[0].push_back({true, w, Region::kBundle, 0, bundle_elements[me]});
    x.groups[0].push_back({false, w, Region::kIncoming, 0, bundle_elements[w]});
    x.incoming_elements[w] = bundle_elements[w];
  }
  return x;
}

std::vector<std::pair<int, int>> BundleBlocks(const GroupLayout& layout,
                                              int from, int to) {
  std::vector<std::pair<int, int>> blocks;
  for (int r : layout.RanksOf(from)) {
    for (int t : layout.RanksOf(to)) blocks.emplace_back(r, t);
  }
  return blocks;
}

Exchange AllToAllExchange(const GroupLayout& layout, int me,
                          const std::vector<int64_t>& counts) {
  const int n = layout.n(), m = layout.m();
  Exchange x;
  x.groups.resize(1);
  x.reductions.resize(1);
  x.incoming_elements.assign(m, 0);
  x.outgoing_elements.assign(m, 0);
  for (int w = 0; w < m; ++w) {
    if (w == me) continue;
    for (const auto& [r, t] : BundleBlocks(layout, me, w)) {
      x.outgoing_elements[w] += counts[r * n + t];
    }
    for (const auto& [r, t] : BundleBlocks(layout, w, me)) {
      x.incoming_elements[w] += counts[r * n + t];
    }
    x.groups[0].push_back(
        {true, w, Region::kOutgoing, 0, x.outgoing_elements[w]});
    x.groups[0].push_back(
        {false, w, Region::kIncoming, 0, x.incoming_elements[w]});
  }
  return x;
}

std::string EncodeBufferBoxes(const std::vector<std::pair<int, Box>>& boxes) {
  std::vector<std::string> items;
  for (const auto& [id, box] : boxes) {
    std::vector<std::string> dims;
    for (const Interval& d : box) dims.push_back(absl::StrCat(d.begin, "-", d.end));
    items.push_back(absl::StrCat(id, ":", absl::StrJoin(dims, ",")));
  }
  return absl::StrJoin(items, ";");
}

absl::StatusOr<std::vector<std::pair<int, Box>>> DecodeBufferBoxes(
    const std::string& text) {
  std::vector<std::pair<int, Box>> boxes;
  if (text.empty()) return boxes;
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("malformed buffer boxes '", text, "': ", why,
                     " (expected ID:BEGIN-END,...;ID:...)"));
  };
  for (absl::string_view item : absl::StrSplit(text, ';')) {
    std::vector<absl::string_view> parts = absl::StrSplit(item, ':');
    int id = 0;
    if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &id)) {
      return bad(absl::StrCat("item '", item, "'"));
    }
    Box box;
    if (!parts[1].empty()) {
      for (absl::string_view dim : absl::StrSplit(parts[1], ',')) {
        std::vector<absl::string_view> ends = absl::StrSplit(dim, '-');
        Interval interval;
        if (ends.size() != 2 || !absl::SimpleAtoi(ends[0], &interval.begin) ||
            !absl::SimpleAtoi(ends[1], &interval.end) || interval.begin < 0 ||
            interval.end < interval.begin) {
          return bad(absl::StrCat("interval '", dim, "'"));
        }
        box.push_back(interval);
      }
    }
    boxes.emplace_back(id, std::move(box));
  }
  return boxes;
}

}  // namespace meshcast::worker::cuda
