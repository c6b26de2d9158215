"""Dump PyTorch's pipeline schedules and PyTorch's own simulated makespans for pplan's tests.

Writes, into the directory given as the first argument (default: tests/data/pytorch next to
this script):

- one `<Class>-p<P>-m<M>-v<V>.csv` per case: the compute-only order of
  `torch.distributed.pipelining.schedules.Schedule<Class>` for P ranks, M micro-batches and V
  stages per rank, written by the schedule's own `_dump_csv(filename, format="compute_only")`
  (CRLF, one row per rank, idle slots as empty fields). ScheduleGPipe and Schedule1F1B are
  single-stage schedules without `_dump_csv`; their `pipeline_order` is written with the same
  `csv.writer` call that `_dump_csv` makes;
- `makespans.csv`: for each file, PyTorch's makespan under unit costs, i.e. the time at which
  the last action ends in `torch.distributed.pipelining._schedule_visualizer
  .add_schedule_op_spacing` (the simulator behind `get_schedule_ops(..., add_spacing=True)`;
  F, I and W take 1 step, B 2, OVERLAP_F_B 3), or `deadlock` where that simulator raises.
  The simulator only knows compute actions, so the order is passed without its idle slots and
  without the REDUCE_GRAD / WAIT_REDUCE_GRAD entries of the single-stage schedules. It does not
  return its timing table, so the table is read from its local variables when it returns.

Run with a PyTorch that has ScheduleDualPipeV and the schedule visualizer:

    python3 -m venv /tmp/torchvenv && /tmp/torchvenv/bin/pip install torch
    /tmp/torchvenv/bin/python tests/data/dump_torch_schedules.py

The checked-in files were written by torch 2.15.0 (CPU, no GPU needed).
"""

import contextlib
import csv
import io
import os
import sys
import warnings

warnings.filterwarnings("ignore")

import torch  # noqa: E402
from torch.distributed.pipelining import _schedule_visualizer as visualizer  # noqa: E402
from torch.distributed.pipelining import schedules  # noqa: E402
from torch.distributed.pipelining.stage import _PipelineStageBase  # noqa: E402

# (class name, ranks P, micro-batches M, stages per rank V)
CASES = [
    ("GPipe", 2, 4, 1),
    ("GPipe", 4, 8, 1),
    ("GPipe", 4, 2, 1),
    ("1F1B", 2, 4, 1),
    ("1F1B", 4, 8, 1),
    ("LoopedBFS", 2, 4, 2),
    ("LoopedBFS", 4, 8, 2),
    ("LoopedBFS", 3, 6, 3),
    ("Interleaved1F1B", 2, 4, 2),
    ("Interleaved1F1B", 4, 8, 2),
    ("Interleaved1F1B", 4, 6, 2),
    ("Interleaved1F1B", 3, 6, 3),
    ("InterleavedZeroBubble", 2, 4, 2),
    ("InterleavedZeroBubble", 4, 8, 2),
    ("InterleavedZeroBubble", 4, 4, 3),
    ("ZBVZeroBubble", 2, 2, 2),
    ("ZBVZeroBubble", 2, 4, 2),
    ("ZBVZeroBubble", 4, 5, 2),
    ("ZBVZeroBubble", 4, 8, 2),
    ("DualPipeV", 2, 4, 2),
    ("DualPipeV", 2, 5, 2),
    ("DualPipeV", 3, 6, 2),
    ("DualPipeV", 3, 8, 2),
    ("DualPipeV", 4, 8, 2),
    ("DualPipeV", 4, 10, 2),
]

V_STYLE = {"ZBVZeroBubble", "DualPipeV"}


class FakeStage(_PipelineStageBase):
    """Just enough of a stage for the schedule constructors, which only read these fields."""

    def __init__(self, stage_index, num_stages, group_size, group_rank):
        self.stage_index = stage_index
        self.num_stages = num_stages
        self.group_size = group_size
        self.group_rank = group_rank
        self.submod = None
        self.stage_index_to_group_rank = {}

    def _create_grad_recv_info(self, *args, **kwargs):
        return None

    def _prepare_forward_infra(self, *args, **kwargs):
        return None

    def _prepare_backward_infra(self, *args, **kwargs):
        return None

    @property
    def is_first(self):
        return self.stage_index == 0

    @property
    def is_last(self):
        return self.stage_index == self.num_stages - 1


def make_schedule(name, p, m, v):
    cls = schedules.get_schedule_class(name)
    if issubclass(cls, schedules.PipelineScheduleSingle):
        return cls(FakeStage(0, p, p, 0), m)
    n = p * v
    # Rank 0's stages; every rank's order is built regardless of which rank constructs it.
    local = [0, n - 1] if name in V_STYLE else [c * p for c in range(v)]
    return cls([FakeStage(s, n, p, 0) for s in local], m)


def write_compute_only(sched, path):
    if hasattr(sched, "_dump_csv"):
        sched._dump_csv(path, format="compute_only")
    else:
        with open(path, "w", newline="") as f:
            writer = csv.writer(f)
            for rank in sched.pipeline_order:
                writer.writerow(sched.pipeline_order[rank])


def torch_makespan(order):
    rows = [
        [a for a in order[rank] if a is not None and a.is_compute_op]
        for rank in sorted(order)
    ]
    code = visualizer.add_schedule_op_spacing.__code__
    seen = {}

    def on_event(frame, event, arg):
        if event == "return" and frame.f_code is code:
            seen.update(frame.f_locals)

    sys.setprofile(on_event)
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # it prints every step
            visualizer.add_schedule_op_spacing(rows)
    except RuntimeError:
        return "deadlock"
    finally:
        sys.setprofile(None)
    # Completion step of every (stage, kind, micro-batch) it scheduled.
    return str(max(seen["scheduled_ops"].values()))


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "pytorch")
    os.makedirs(out, exist_ok=True)
    lines = [
        f"# torch {torch.__version__}: written by tests/data/dump_torch_schedules.py",
        "file,class,p,m,v,placement,torch_makespan",
    ]
    for name, p, m, v in CASES:
        sched = make_schedule(name, p, m, v)
        fname = f"{name}-p{p}-m{m}-v{v}.csv"
        write_compute_only(sched, os.path.join(out, fname))
        placement = "v" if name in V_STYLE else "loop"
        makespan = torch_makespan(sched.pipeline_order)
        lines.append(f"{fname},{name},{p},{m},{v},{placement},{makespan}")
        print(lines[-1])
    with open(os.path.join(out, "makespans.csv"), "w", newline="") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
