// Which threads the CPU kernels may spread over. A communicator's progress thread runs its ops'
// kernels (a step's reduction, AVG scaling) while the rank's own thread computes beside it with
// torch's intra-op threads, which already take the rank's share of the cores: extra OpenMP threads
// there would outnumber the cores left over, and libgomp's idle workers spin after each region.
#pragma once

namespace pycomm {

// Set on a thread whose kernels must run on it alone (the progress thread); read by
// kernels/cpu/parallel.h before it opens a parallel region.
inline thread_local bool kernels_on_this_thread_only = false;

}  // namespace pycomm
