// Sequence packing (Krell et al., arXiv 2107.02027): SPFHP over the length histogram, and
// Graphcore's packed layout (pack_pretraining_data.py): per-token sequence index, positions that
// restart per sequence, masked-LM slots at the front, each sequence's [CLS] position, NSP per
// sequence.
#pragma once

#include <cstdint>
#include <vector>

#include "datasets/bert/instances.h"

namespace datasets::bert {

struct PackStrategy {
  std::vector<int32_t> lengths;  // the sequence lengths in one pack, longest first
  int64_t count = 0;             // how many packs use it
};

// Shortest-pack-first histogram packing: lengths from longest to shortest; each length's
// sequences go into the open packs with the most room that fits them (worst fit), new packs
// opened for the rest. One change to Graphcore's version (which opens one pack per remaining
// sequence): the sequences of one length that open new packs go min(maxPerPack, maxLength / l) to
// a pack, so a histogram with a single short length still packs. histogram[l] = number of sequences
// of length l (l = 1..maxLength).
std::vector<PackStrategy> packSpfhp(const std::vector<int64_t>& histogram, int maxLength,
                                    int maxPerPack);

struct PackingStats {
  int64_t sequences = 0, packs = 0, tokens = 0;
  double efficiency = 0;          // tokens / (packs * maxLength)
  double paddingEfficiency = 0;   // tokens / (sequences * maxLength), i.e. without packing
  double speedupOverPadding = 0;  // sequences / packs
};
PackingStats packingStats(const std::vector<PackStrategy>& strategies, int maxLength);

// Assigns sequences (by length) to packs following the strategies: returns, per pack, the
// indices of its sequences. Deterministic: sequences of one length are taken in index order.
std::vector<std::vector<int32_t>> assignPacks(const std::vector<PackStrategy>& strategies,
                                              const std::vector<int32_t>& lengths);

struct PackedLayout {
  int maxSeqLength = 128;
  int maskedSlots = 0;  // >= the masked tokens of any pack
  int maxPerPack = 3;
  // Bound on the masked tokens of a pack: sum of round(p * len_i) <= p * L + k / 2.
  static int slotsFor(int maxSeqLength, double maskedLmProb, int maxPerPack, int predictionsCap);
};

// One packed record. Index 0 in inputMask / maskedWeights means padding; sequences are 1..k.
struct PackedRecord {
  std::vector<int32_t> inputIds;          // maxSeqLength
  std::vector<uint8_t> inputMask;         // sequence index per token, 0 = pad
  std::vector<uint8_t> segmentIds;        // 0 for [CLS] A [SEP], 1 for B [SEP]
  std::vector<uint16_t> positions;        // restart at 0 for each sequence
  std::vector<uint16_t> maskedPositions;  // maskedSlots, the pack's masked tokens first
  std::vector<int32_t> maskedIds;         // original ids (labels)
  std::vector<uint8_t> maskedWeights;     // sequence index of the slot, 0 = unused
  std::vector<uint16_t> clsPositions;     // maxPerPack: where each sequence's [CLS] is
  std::vector<uint8_t> nspLabels;         // maxPerPack: 1 = random next
  std::vector<uint8_t> nspWeights;        // maxPerPack: 1 = a sequence is there

  explicit PackedRecord(const PackedLayout& layout = {});
  bool operator==(const PackedRecord&) const = default;
};

// Throws DatasetError when the sequences do not fit the layout.
PackedRecord packRecord(const std::vector<const Instance*>& sequences, const PackedLayout& layout);

}  // namespace datasets::bert
