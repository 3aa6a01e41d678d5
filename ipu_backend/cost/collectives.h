// Cross-replica gradient all-reduce cost on IPU-PODs.
//
// Algorithm: ring reduce-scatter + all-gather. Each of R ring members sends (R-1)/R x B bytes in
// each half, 2 (R-1)/R x B in all, over the slowest link of the ring, in 2 hops.
//  * Inside one POD64 (and POD16) the ring runs over IPU-Links. A bidirectional ring splits the
//    buffer in two halves that travel in opposite directions, so each IPU drives
//    `ringLinksPerIpu` (2) links at once: 2 x 32 GB/s (10 links share the 320 GB/s IPU-Link
//    figure of the Target). The POD64's 2-D torus offers more links, which a ring does not use.
//  * Beyond one POD64 (POD128 = 2 x POD64, POD256 = 4 x POD64) the reduction is hierarchical:
//    reduce-scatter inside each POD64 (every IPU ends with B / (IPUs in the POD64) of the sum),
//    an all-reduce of those shards across the POD64s over the GW-Links (every M2000's gateway
//    links, shared by its 4 IPUs), then an all-gather inside each POD64.
// Latencies per hop are estimates (a few microseconds), stated as such in the options.
#pragma once

#include <cstdint>

#include "ipu_backend/target/target.h"

namespace ipu::cost {

using i64 = std::int64_t;

struct PodShape {
  int ipus = 16;           // IPUs in the system
  int replicas = 16;       // data-parallel replicas
  int ipusPerReplica = 1;  // pipeline / model-parallel IPUs in one replica
  int pod64Count = 1;      // POD64s joined by GW-Links (1 for POD16 and POD64)
  // The MLPerf v1.1 systems (docs: IPU facts), one replica per IPU unless told otherwise.
  static PodShape pod(int ipus, int ipusPerReplica = 1);
};

struct CollectiveOptions {
  // 10 IPU-Links per GC200 (docs: IPU facts): per-link bandwidth = Target::ipuLinkBytesPerSec / 10.
  int ipuLinksPerIpu = 10;
  // Links one IPU drives at once in a bidirectional ring (one to each neighbour).
  int ringLinksPerIpu = 2;
  // GW-Links: 2 per M2000 (docs: IPU facts), each 100 GbE = 12.5 GB/s.
  int gwLinksPerM2000 = 2;
  double gwLinkBytesPerSec = 12.5e9;
  int ipusPerM2000 = 4;
  int ipusPerPod64 = 64;
  // Per-hop latencies (software step + link): estimates, not measured figures.
  double ipuLinkHopSeconds = 2e-6;
  double gwLinkHopSeconds = 10e-6;  // RoCE over 100 GbE through the gateway
};

// Seconds to all-reduce `bytes` (per replica) over the replicas of `pod`. 0 when replicas <= 1.
double allReduceSeconds(i64 bytes, const PodShape& pod, const Target& target = Target::mk2(),
                        const CollectiveOptions& opts = {});

// Ring all-reduce of `bytes` over `members` at `bytesPerSec` per member with `hopSeconds` a hop.
double ringAllReduceSeconds(double bytes, int members, double bytesPerSec, double hopSeconds);

}  // namespace ipu::cost
