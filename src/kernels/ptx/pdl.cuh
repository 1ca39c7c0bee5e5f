// Programmatic dependent launch (PDL, sm_90): the device half of a launch with
// cudaLaunchAttributeProgrammaticStreamSerialization. A kernel launched that
// way may start while the kernel before it in the stream is still running;
// it must not touch what that kernel writes before griddep_wait().
//
// How the decode kernels use it: every CTA calls griddep_launch_dependents()
// at its start (so the NEXT kernel's CTAs may become resident as soon as SM
// resources free up), streams its weights (which no kernel writes) before
// griddep_wait(), and reads activations / writes outputs only after it.
// Without the launch attribute both instructions are no-ops.
#pragma once

namespace futr::device::ptx {

// griddepcontrol.wait: blocks until every prerequisite grid has completed and
// its memory operations are visible; why "memory": no load of an activation
// may be hoisted above it.
__device__ __forceinline__ void griddep_wait() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }

// griddepcontrol.launch_dependents: this CTA no longer holds back the launch
// of the dependent grid (it launches once every CTA has signalled or exited).
__device__ __forceinline__ void griddep_launch_dependents() {
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
}

}  // namespace futr::device::ptx
