"""One step under torch.profiler, for anchor's report (docs/program.md,
"What anchor measures"): its trace as profile.json, and the time this rank
spent in collectives during it."""
import os
import time

import torch

# Names of the spans a collective leaves in a trace: c10d's operators
# (c10d::allreduce_), the backends' own (gloo:all_reduce, nccl:all_reduce),
# record_param_comms, and NCCL's kernels on the GPU (ncclDevKernel_AllReduce_...).
_COMM = ("c10d::", "gloo:", "nccl", "record_param_comms", "all_reduce", "allreduce", "all_gather", "allgather",
         "reduce_scatter", "reducescatter", "broadcast", "all_to_all", "alltoall")


def is_collective(name):
    n = name.lower()
    return any(k in n for k in _COMM)


def _union_seconds(ranges):
    """The length of the union of (start, end) ranges in microseconds, in seconds."""
    total, end = 0.0, None
    for a, b in sorted(ranges):
        if end is None or a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total / 1e6


class StepProfile:
    """torch.profiler over one step: CPU activities, and CUDA's on a GPU
    (Kineto; a torch without Kineto falls back to the autograd profiler's
    CPU operators). start() where the step begins, stop() where it ends."""

    def __init__(self, device):
        self.device, self.prof, self.t0, self.error = device, None, None, None
        self.kineto = bool(getattr(torch.autograd, "kineto_available", lambda: False)())

    def start(self):
        try:
            from torch.profiler import ProfilerActivity, profile
            activities = [ProfilerActivity.CPU]
            if self.device.type == "cuda":
                activities.append(ProfilerActivity.CUDA)
            self.prof = profile(activities=activities)
            self.prof.start()
            self.t0 = time.monotonic()
        except Exception as e:  # noqa: BLE001 - the step runs unprofiled; the reason is reported
            self.prof, self.error = None, "%s: %s" % (type(e).__name__, e)

    def stop(self, path):
        """Stops the profiler and returns the profile line's fields; writes
        the trace to ``path`` (published whole: a temporary file renamed)
        when path is given. Never raises: a failure is the line's error."""
        if self.prof is None:
            return {"error": self.error or "the profiler did not start"}
        out = {"seconds": time.monotonic() - self.t0,
               "profiler": ("torch.profiler (Kineto: CPU%s activities)" % (" and CUDA" if self.device.type == "cuda"
                                                                          else "") if self.kineto else
                            "torch.profiler without Kineto (this torch has none): the autograd profiler's CPU "
                            "operators")}
        try:
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            self.prof.stop()
            events = self.prof.events()
            out["events"] = len(events)
            out["comm_s"] = _union_seconds([(e.time_range.start, e.time_range.end) for e in events
                                            if is_collective(e.name)])
            if path:
                tmp = "%s.tmp-%d" % (path, os.getpid())
                try:
                    self.prof.export_chrome_trace(tmp)
                    os.replace(tmp, path)
                finally:
                    if os.path.exists(tmp):
                        os.unlink(tmp)
                out["file"] = os.path.basename(path)
        except Exception as e:  # noqa: BLE001 - reported in the line, the run goes on
            out["error"] = "%s: %s" % (type(e).__name__, e)
        return out
