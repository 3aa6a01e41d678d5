#include "datasets/bert/packing.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include "datasets/error.h"

namespace datasets::bert {

std::vector<PackStrategy> packSpfhp(const std::vector<int64_t>& histogram, int maxLength,
                                    int maxPerPack) {
  if (maxLength < 1 || maxPerPack < 1)
    throw DatasetError("packing: max length and max sequences per pack must be >= 1");
  if (static_cast<int>(histogram.size()) > maxLength + 1)
    for (size_t l = static_cast<size_t>(maxLength) + 1; l < histogram.size(); ++l)
      if (histogram[l] > 0)
        throw DatasetError("packing: " + std::to_string(histogram[l]) + " sequences of length " +
                           std::to_string(l) + " exceed the pack length " +
                           std::to_string(maxLength));
  // Open packs grouped by remaining room; each group entry is a strategy with a count.
  std::vector<std::vector<PackStrategy>> open(static_cast<size_t>(maxLength) + 1);
  std::vector<PackStrategy> closed;
  const auto place = [&](PackStrategy s, int room) {
    if (room == 0 || static_cast<int>(s.lengths.size()) == maxPerPack)
      closed.push_back(std::move(s));
    else
      open[static_cast<size_t>(room)].push_back(std::move(s));
  };
  for (int length = std::min<int>(maxLength, static_cast<int>(histogram.size()) - 1); length >= 1;
       --length) {
    int64_t left = histogram[static_cast<size_t>(length)];
    for (int room = maxLength; room >= length && left > 0; --room) {
      auto& group = open[static_cast<size_t>(room)];
      while (!group.empty() && left > 0) {
        PackStrategy& s = group.back();
        const int64_t take = std::min(left, s.count);
        PackStrategy extended{s.lengths, take};
        extended.lengths.push_back(length);
        s.count -= take;
        left -= take;
        if (s.count == 0) group.pop_back();
        place(std::move(extended), room - length);
      }
    }
    if (left > 0) {
      const int64_t k = std::min<int64_t>(maxPerPack, maxLength / length);
      if (left / k > 0)
        place(PackStrategy{std::vector<int32_t>(static_cast<size_t>(k), length), left / k},
              maxLength - static_cast<int>(k) * length);
      if (left % k > 0)
        place(PackStrategy{std::vector<int32_t>(static_cast<size_t>(left % k), length), 1},
              maxLength - static_cast<int>(left % k) * length);
    }
  }
  for (auto& group : open)
    for (auto& s : group) closed.push_back(std::move(s));
  // Merge equal strategies (a strategy may have been reached along several routes).
  std::map<std::vector<int32_t>, int64_t> merged;
  for (const auto& s : closed)
    if (s.count > 0) merged[s.lengths] += s.count;
  std::vector<PackStrategy> out;
  for (auto& [lengths, count] : merged) out.push_back({lengths, count});
  return out;
}

PackingStats packingStats(const std::vector<PackStrategy>& strategies, int maxLength) {
  PackingStats st;
  for (const auto& s : strategies) {
    st.packs += s.count;
    st.sequences += s.count * static_cast<int64_t>(s.lengths.size());
    for (int32_t l : s.lengths) st.tokens += s.count * l;
  }
  if (st.packs > 0) {
    st.efficiency = static_cast<double>(st.tokens) / (static_cast<double>(st.packs) * maxLength);
    st.paddingEfficiency =
        static_cast<double>(st.tokens) / (static_cast<double>(st.sequences) * maxLength);
    st.speedupOverPadding = static_cast<double>(st.sequences) / static_cast<double>(st.packs);
  }
  return st;
}

std::vector<std::vector<int32_t>> assignPacks(const std::vector<PackStrategy>& strategies,
                                              const std::vector<int32_t>& lengths) {
  std::map<int32_t, std::vector<int32_t>> byLength;  // length -> sequence indices (ascending)
  for (size_t i = 0; i < lengths.size(); ++i)
    byLength[lengths[i]].push_back(static_cast<int32_t>(i));
  std::map<int32_t, size_t> next;
  std::vector<std::vector<int32_t>> packs;
  for (const auto& s : strategies)
    for (int64_t c = 0; c < s.count; ++c) {
      std::vector<int32_t> pack;
      for (int32_t l : s.lengths) {
        auto& queue = byLength[l];
        size_t& k = next[l];
        if (k >= queue.size())
          throw DatasetError("packing: the strategies ask for more sequences of length " +
                             std::to_string(l) + " than there are");
        pack.push_back(queue[k++]);
      }
      packs.push_back(std::move(pack));
    }
  for (const auto& [l, queue] : byLength)
    if (next[l] != queue.size())
      throw DatasetError("packing: " + std::to_string(queue.size() - next[l]) +
                         " sequences of length " + std::to_string(l) + " left unpacked");
  return packs;
}

int PackedLayout::slotsFor(int maxSeqLength, double maskedLmProb, int maxPerPack,
                           int predictionsCap) {
  const int bound = static_cast<int>(std::floor(maskedLmProb * maxSeqLength + 0.5 * maxPerPack));
  return std::min(bound, predictionsCap * maxPerPack);
}

PackedRecord::PackedRecord(const PackedLayout& l)
    : inputIds(static_cast<size_t>(l.maxSeqLength)),
      inputMask(static_cast<size_t>(l.maxSeqLength)),
      segmentIds(static_cast<size_t>(l.maxSeqLength)),
      positions(static_cast<size_t>(l.maxSeqLength)),
      maskedPositions(static_cast<size_t>(l.maskedSlots)),
      maskedIds(static_cast<size_t>(l.maskedSlots)),
      maskedWeights(static_cast<size_t>(l.maskedSlots)),
      clsPositions(static_cast<size_t>(l.maxPerPack)),
      nspLabels(static_cast<size_t>(l.maxPerPack)),
      nspWeights(static_cast<size_t>(l.maxPerPack)) {}

PackedRecord packRecord(const std::vector<const Instance*>& sequences, const PackedLayout& layout) {
  if (static_cast<int>(sequences.size()) > layout.maxPerPack)
    throw DatasetError("packing: " + std::to_string(sequences.size()) +
                       " sequences in one pack, at most " + std::to_string(layout.maxPerPack));
  PackedRecord r(layout);
  size_t at = 0, slot = 0;
  for (size_t k = 0; k < sequences.size(); ++k) {
    const Instance& s = *sequences[k];
    if (at + s.tokens.size() > static_cast<size_t>(layout.maxSeqLength))
      throw DatasetError("packing: pack of " + std::to_string(at + s.tokens.size()) +
                         " tokens exceeds the length " + std::to_string(layout.maxSeqLength));
    if (slot + s.maskedPositions.size() > static_cast<size_t>(layout.maskedSlots))
      throw DatasetError("packing: " + std::to_string(slot + s.maskedPositions.size()) +
                         " masked tokens in one pack, more than the " +
                         std::to_string(layout.maskedSlots) + " slots");
    const auto index = static_cast<uint8_t>(k + 1);
    for (size_t t = 0; t < s.tokens.size(); ++t) {
      r.inputIds[at + t] = s.tokens[t];
      r.inputMask[at + t] = index;
      r.segmentIds[at + t] = static_cast<int32_t>(t) >= s.segmentBStart ? 1 : 0;
      r.positions[at + t] = static_cast<uint16_t>(t);
    }
    for (size_t m = 0; m < s.maskedPositions.size(); ++m, ++slot) {
      r.maskedPositions[slot] =
          static_cast<uint16_t>(at + static_cast<size_t>(s.maskedPositions[m]));
      r.maskedIds[slot] = s.maskedLabels[m];
      r.maskedWeights[slot] = index;
    }
    r.clsPositions[k] = static_cast<uint16_t>(at);
    r.nspLabels[k] = s.randomNext ? 1 : 0;
    r.nspWeights[k] = 1;
    at += s.tokens.size();
  }
  return r;
}

}  // namespace datasets::bert
