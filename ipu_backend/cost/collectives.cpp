#include "ipu_backend/cost/collectives.h"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

namespace ipu::cost {

PodShape PodShape::pod(int ipus, int ipusPerReplica) {
  if (ipus < 1 || ipusPerReplica < 1 || ipus % ipusPerReplica != 0)
    throw std::invalid_argument(fmt::format(
        "PodShape::pod: {} IPUs do not split into replicas of {} IPUs", ipus, ipusPerReplica));
  constexpr int kIpusPerPod64 = 64;  // IPU-POD64 = 16 M2000 x 4 IPUs (docs: IPU facts)
  return PodShape{ipus, ipus / ipusPerReplica, ipusPerReplica, std::max(1, ipus / kIpusPerPod64)};
}

double ringAllReduceSeconds(double bytes, int members, double bytesPerSec, double hopSeconds) {
  if (members <= 1 || bytes <= 0) return 0;
  const double r = members;
  // Reduce-scatter then all-gather: each steps of B/R bytes per member.
  return 2.0 * (r - 1.0) / r * bytes / bytesPerSec + 2.0 * (r - 1.0) * hopSeconds;
}

double allReduceSeconds(i64 bytes, const PodShape& pod, const Target& target,
                        const CollectiveOptions& o) {
  if (pod.replicas <= 1 || bytes <= 0) return 0;
  if (pod.pod64Count < 1 || pod.replicas % pod.pod64Count != 0)
    throw std::invalid_argument(
        fmt::format("allReduceSeconds: {} replicas over {} POD64s", pod.replicas, pod.pod64Count));
  // A pipelined replica holds its gradients spread over its IPUs; each IPU reduces its share with
  // the same stage of the other replicas, all rings in parallel.
  const double perIpuBytes = static_cast<double>(bytes) / std::max(1, pod.ipusPerReplica);
  const double ringBw =
      target.ipuLinkBytesPerSec / o.ipuLinksPerIpu * std::min(o.ringLinksPerIpu, o.ipuLinksPerIpu);
  if (pod.pod64Count == 1)
    return ringAllReduceSeconds(perIpuBytes, pod.replicas, ringBw, o.ipuLinkHopSeconds);

  // Hierarchical: reduce-scatter + all-gather inside each POD64 (the same ring cost as one
  // all-reduce), an all-reduce of the 1/r shards across POD64s over the GW-Links in between.
  const int r = pod.replicas / pod.pod64Count;
  const double intra = ringAllReduceSeconds(perIpuBytes, r, ringBw, o.ipuLinkHopSeconds);
  const double gwPerIpu = o.gwLinksPerM2000 * o.gwLinkBytesPerSec / o.ipusPerM2000;
  const double cross =
      ringAllReduceSeconds(perIpuBytes / r, pod.pod64Count, gwPerIpu, o.gwLinkHopSeconds);
  return intra + cross;
}

}  // namespace ipu::cost
