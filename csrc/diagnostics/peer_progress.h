// Which ranks have not reached an op, for stall errors: "ranks 2, 5 have not reached allreduce #17",
// as Horovod's stall inspector names them. An engine that can read its peers' progress without their
// help implements this (MPI: an RMA window, transport/mpi/progress_window.h); CommHealth publishes
// every submitted collective to it, and the stall inspector asks it once a wait times out.
#pragma once

#include <string>

#include "common/transport.h"

namespace pycomm {

class PeerProgress {
 public:
  virtual ~PeerProgress() = default;
  // `latest` was just submitted (OpInfo::collective_index set). Called for every collective, in
  // submission order, so it must cost no more than a few local stores.
  virtual void publish(const OpInfo& latest) = 0;
  // For the collective `waited` this rank has submitted: "ranks 2, 5 have not reached it (rank 2's
  // latest collective is allreduce #16; rank 5 did not answer within 2 s)", or that every rank has.
  // Bounded (about 2 s at most), never throws; "" when nothing can be said.
  virtual std::string laggards(const OpInfo& waited) = 0;
};

}  // namespace pycomm
